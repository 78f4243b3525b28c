package cuda_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/internal/packbench"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
)

var bench struct {
	once sync.Once
	res  []cuda.BenchResult
	err  error
}

// BenchmarkPackUnpack runs BenchPackUnpack once per process (1 GiB, rows of
// 256 B, 4 KiB and 64 KiB at twice their width apart; median of 20 timed
// launches each) and reports each op's bandwidth relative to a plain copy.
// b.N does not matter: the function times its own launches with events.
func BenchmarkPackUnpack(b *testing.B) {
	ctx := gputest.Context(b)
	gputest.SkipIfNotAvailable(b, nvrtc.Load(), nvrtc.ErrNotAvailable)
	bench.once.Do(func() {
		bench.res, bench.err = cuda.BenchPackUnpack(ctx, cuda.BenchOptions{})
		if bench.err == nil {
			// Printed, not logged: benchmark logs are cut at ten lines.
			fmt.Print(packbench.Format(bench.res))
		}
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	for range b.N {
	}
	for _, r := range bench.res {
		name := r.Op + "-" + itoa(int64(r.RowBytes)) + "B"
		b.ReportMetric(r.GBps, name+"-GB/s")
		if r.Op != "copy" {
			b.ReportMetric(100*r.VsCopy, name+"-%copy")
		}
	}
}
