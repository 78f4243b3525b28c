package perf_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/perf"
)

func TestFormatPack(t *testing.T) {
	res := []perf.PackResult{
		{RowBytes: 256, Op: "copy", Bytes: 1 << 30, Median: 507_912 * time.Nanosecond, GBps: 2114.2, VsCopy: 1},
		{RowBytes: 256, Op: "pack", Bytes: 1 << 30, Median: 558_849 * time.Nanosecond, GBps: 1921.66, VsCopy: 0.9089},
		{RowBytes: 65536, Op: "memcpy2d", Bytes: 1 << 30, Median: 1_284_801 * time.Nanosecond, GBps: 835.7, VsCopy: 0.3963},
	}
	want := "" +
		"     row  op             bytes      median       GB/s  vs copy\n" +
		"     256  copy      1073741824     507.9µs     2114.2   100.0%\n" +
		"     256  pack      1073741824     558.8µs     1921.7    90.9%\n" +
		"   65536  memcpy2d  1073741824    1.2848ms      835.7    39.6%\n"
	if got := perf.FormatPack(res); got != want {
		t.Errorf("FormatPack:\n%s\nwant:\n%s", got, want)
	}
	if got, want := perf.FormatPack(nil), "     row  op             bytes      median       GB/s  vs copy\n"; got != want {
		t.Errorf("FormatPack(nil) = %q, want the header alone %q", got, want)
	}
}

func TestFormatQuant(t *testing.T) {
	got := perf.FormatQuant([]perf.QuantResult{{RowBytes: 4096, Op: "quant-pack", Bytes: 1 << 30, Median: 612_345 * time.Nanosecond, GBps: 1753.5, VsPack: 0.912}})
	for _, w := range []string{"vs pack", "quant-pack", "612.3µs", "1753.5", "91.2%"} {
		if !strings.Contains(got, w) {
			t.Errorf("FormatQuant lacks %q:\n%s", w, got)
		}
	}
	want := "" +
		"     row  op                bf16 bytes      median       GB/s   vs pack\n" +
		"    4096  quant-pack        1073741824     612.3µs     1753.5     91.2%\n"
	if got != want {
		t.Errorf("FormatQuant:\n%s\nwant:\n%s", got, want)
	}
}

// TestPackUnpackGPU runs the pack benchmark small on GPU 0 (it skips,
// with the reason, where there is none): every op at every row width,
// each against the copy at its width.
func TestPackUnpackGPU(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	res, err := perf.PackUnpack(ctx, perf.PackOptions{TotalBytes: 1 << 20, Iters: 2, Warmup: 1})
	if err != nil || len(res) != 12 {
		t.Fatalf("%d results, %v", len(res), err)
	}
	for _, r := range res {
		if !(r.GBps > 0) || (r.Op == "copy" && r.VsCopy != 1) {
			t.Errorf("%+v", r)
		}
	}
}

// TestQuantizeGPU runs the FP8 benchmark small on GPU 0 (skipping where
// there is none).
func TestQuantizeGPU(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	res, err := perf.Quantize(ctx, perf.QuantOptions{TotalBytes: 1 << 20, Mode: fp8.Block, Iters: 2, Warmup: 1})
	if err != nil || len(res) != 18 {
		t.Fatalf("%d results, %v", len(res), err)
	}
}

var packBench struct {
	once sync.Once
	res  []perf.PackResult
	err  error
}

// BenchmarkPackUnpack runs PackUnpack once per process (1 GiB, rows of
// 256 B, 4 KiB and 64 KiB at twice their width apart; median of 20 timed
// launches each) and reports each op's bandwidth relative to a plain copy.
// b.N does not matter: the function times its own launches with events.
func BenchmarkPackUnpack(b *testing.B) {
	ctx := gputest.Context(b)
	gputest.SkipIfNotAvailable(b, nvrtc.Load(), nvrtc.ErrNotAvailable)
	packBench.once.Do(func() {
		packBench.res, packBench.err = perf.PackUnpack(ctx, perf.PackOptions{})
		if packBench.err == nil {
			// Printed, not logged: benchmark logs are cut at ten lines.
			fmt.Print(perf.FormatPack(packBench.res))
		}
	})
	if packBench.err != nil {
		b.Fatal(packBench.err)
	}
	for range b.N {
	}
	for _, r := range packBench.res {
		name := r.Op + "-" + strconv.Itoa(r.RowBytes) + "B"
		b.ReportMetric(r.GBps, name+"-GB/s")
		if r.Op != "copy" {
			b.ReportMetric(100*r.VsCopy, name+"-%copy")
		}
	}
}

var quantBench struct {
	once sync.Once
	res  []perf.QuantResult
	err  error
}

// BenchmarkQuantize runs Quantize once per process (1 GiB of bf16 input
// in rows of 256 B, 4 KiB and 64 KiB at twice their width apart, 128x128
// blocks; median of 20 timed launches each) and reports each op's
// bandwidth and its speed relative to the bf16 pack. b.N does not
// matter: the function times its own launches with events.
func BenchmarkQuantize(b *testing.B) {
	ctx := gputest.Context(b)
	gputest.SkipIfNotAvailable(b, nvrtc.Load(), nvrtc.ErrNotAvailable)
	quantBench.once.Do(func() {
		quantBench.res, quantBench.err = perf.Quantize(ctx, perf.QuantOptions{})
		if quantBench.err == nil {
			fmt.Print(perf.FormatQuant(quantBench.res))
		}
	})
	if quantBench.err != nil {
		b.Fatal(quantBench.err)
	}
	for range b.N {
	}
	for _, r := range quantBench.res {
		name := r.Op + "-" + strconv.Itoa(r.RowBytes) + "B"
		b.ReportMetric(r.GBps, name+"-GB/s")
		if r.Op != "pack" {
			b.ReportMetric(100*r.VsPack, name+"-%pack")
		}
	}
}
