package fp8_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/fp8/fp8test"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// BenchmarkPackQuantize measures quantize-while-packing (fp8.Grid.Pack)
// against a plain pack of the same input (transport.HostMemory.Pack) in one
// run: a source rank holds a 2048 x 8192 matrix (32 MiB of bf16) and sends
// its left half (16 MiB in 2048 runs of 8 KiB at a 16 KiB pitch), as a
// reshard from rows to columns does. Every iteration packs, quantize-packs
// and gathers partial amaxes (fp8.Grid.Amax, the pass before) of the same
// region, so that a busy machine slows all three alike. Reported: each
// one's input GB/s, and quant/pack, the quantize-pack's throughput over the
// plain pack's (1 = as fast; above 1 = faster, since it writes half the
// bytes). No thresholds: it measures, the tests check.
func BenchmarkPackQuantize(b *testing.B) {
	for _, c := range []struct {
		name string
		dt   dtype.DType
		mode fp8.Mode
	}{
		{"bf16-block", dtype.BF16, fp8.Block},
		{"bf16-row", dtype.BF16, fp8.Row},
		{"bf16-tensor", dtype.BF16, fp8.Tensor},
		{"f32-block", dtype.F32, fp8.Block},
	} {
		b.Run(c.name, func(b *testing.B) { benchPackQuantize(b, c.dt, c.mode) })
	}
}

func benchPackQuantize(b *testing.B, dt dtype.DType, mode fp8.Mode) {
	rows, cols := int64(2048), int64(8192)
	if dt == dtype.F32 {
		rows /= 2 // the same 32 MiB buffer and 16 MiB region
	}
	shape := []int64{rows, cols}
	local := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	box := placement.Box{Lo: []int64{0, 0}, Hi: []int64{rows, cols / 2}}
	esz := int64(dt.Size())
	data := fp8test.Random(rand.New(rand.NewPCG(1, 2)), dt, shape, spread)
	at := strided.Describe(local, box, esz)
	g, err := fp8.NewGrid(shape, mode)
	if err != nil {
		b.Fatal(err)
	}
	reg := fp8.Region{DType: dt, Data: data, At: at, Box: box}
	amax, err := g.WindowFor(box)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Amax(amax, reg); err != nil {
		b.Fatal(err)
	}
	scales := fp8.Window{Blocks: amax.Blocks, Values: append([]float32(nil), amax.Values...)}
	if err := scales.ToScales(); err != nil {
		b.Fatal(err)
	}
	in := at.Bytes()
	packed := make([]byte, in)
	quant := make([]byte, box.Elems())
	var mem transport.HostMemory
	var tPack, tQuant, tAmax time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := mem.Pack(transport.HostBuffer(packed), 0, transport.HostBuffer(data), at); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := g.Pack(quant, reg, scales); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := g.Amax(amax, reg); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		tPack += t1.Sub(t0)
		tQuant += t2.Sub(t1)
		tAmax += t3.Sub(t2)
	}
	gbps := func(d time.Duration) float64 { return float64(in) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gbps(tPack), "pack-GB/s")
	b.ReportMetric(gbps(tQuant), "quant-GB/s")
	b.ReportMetric(gbps(tAmax), "amax-GB/s")
	b.ReportMetric(tPack.Seconds()/tQuant.Seconds(), "quant/pack")
	b.ReportMetric(tPack.Seconds()/(tQuant+tAmax).Seconds(), "amax+quant/pack")
}

// TestPackAllocates nothing once warm.
func TestPackAllocs(t *testing.T) {
	shape := []int64{256, 512}
	data := fp8test.Random(rand.New(rand.NewPCG(3, 4)), dtype.BF16, shape, spread)
	box := placement.Box{Lo: []int64{0, 64}, Hi: []int64{256, 448}}
	local := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	g, _ := fp8.NewGrid(shape, fp8.Block)
	reg := fp8.Region{DType: dtype.BF16, Data: data, At: strided.Describe(local, box, 2), Box: box}
	w, _ := g.WindowFor(box)
	out := make([]byte, box.Elems())
	if err := g.Amax(w, reg); err != nil {
		t.Fatal(err)
	}
	if err := w.ToScales(); err != nil {
		t.Fatal(err)
	}
	if err := g.Pack(out, reg, w); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() {
		_ = g.Amax(w, reg)
		_ = g.Pack(out, reg, w)
	}); n != 0 {
		t.Errorf("Amax and Pack allocate %v times per call", n)
	}
}
