package cuda_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
)

var quantBench struct {
	once sync.Once
	res  []cuda.QuantBenchResult
	err  error
}

// BenchmarkQuantize runs BenchQuantize once per process (1 GiB of bf16
// input in rows of 256 B, 4 KiB and 64 KiB at twice their width apart,
// 128x128 blocks; median of 20 timed launches each) and reports each op's
// bandwidth and its speed relative to the bf16 pack. b.N does not matter:
// the function times its own launches with events.
func BenchmarkQuantize(b *testing.B) {
	ctx := gputest.Context(b)
	gputest.SkipIfNotAvailable(b, nvrtc.Load(), nvrtc.ErrNotAvailable)
	quantBench.once.Do(func() {
		quantBench.res, quantBench.err = cuda.BenchQuantize(ctx, cuda.QuantBenchOptions{})
		if quantBench.err == nil {
			fmt.Print(cuda.FormatQuantBench(quantBench.res))
		}
	})
	if quantBench.err != nil {
		b.Fatal(quantBench.err)
	}
	for range b.N {
	}
	for _, r := range quantBench.res {
		name := r.Op + "-" + itoa(int64(r.RowBytes)) + "B"
		b.ReportMetric(r.GBps, name+"-GB/s")
		if r.Op != "pack" {
			b.ReportMetric(100*r.VsPack, name+"-%pack")
		}
	}
}
