// Package packbench renders the results of cuda.BenchPackUnpack, the GPU
// pack/unpack benchmark, for people: the measuring stays in package cuda,
// the table is here, for refit pack-bench and the cuda benchmarks to print.
//
//	res, err := cuda.BenchPackUnpack(ctx, cuda.BenchOptions{})
//	fmt.Print(packbench.Format(res))
//
//	     row  op             bytes      median       GB/s  vs copy
//	     256  copy      1073741824     507.9µs     2114.2   100.0%
//	     256  pack      1073741824     558.8µs     1921.7    90.9%
package packbench

import (
	"fmt"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/cuda"
)

// Format renders res as a table with a header line and one line per result,
// in the order given: the row width, the op, the bytes moved, the median
// time (to 0.1 µs), the bandwidth in decimal GB/s and the bandwidth as a
// percentage of the plain copy's at the same width.
func Format(res []cuda.BenchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8s  %-8s  %10s  %10s  %9s  %7s\n", "row", "op", "bytes", "median", "GB/s", "vs copy")
	for _, r := range res {
		fmt.Fprintf(&b, "%8d  %-8s  %10d  %10s  %9.1f  %6.1f%%\n",
			r.RowBytes, r.Op, r.Bytes, r.Median.Round(time.Microsecond/10), r.GBps, 100*r.VsCopy)
	}
	return b.String()
}
