package packbench

import (
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
)

func TestFormat(t *testing.T) {
	res := []cuda.BenchResult{
		{RowBytes: 256, Op: "copy", Bytes: 1 << 30, Median: 507_912 * time.Nanosecond, GBps: 2114.2, VsCopy: 1},
		{RowBytes: 256, Op: "pack", Bytes: 1 << 30, Median: 558_849 * time.Nanosecond, GBps: 1921.66, VsCopy: 0.9089},
		{RowBytes: 65536, Op: "memcpy2d", Bytes: 1 << 30, Median: 1_284_801 * time.Nanosecond, GBps: 835.7, VsCopy: 0.3963},
	}
	want := "" +
		"     row  op             bytes      median       GB/s  vs copy\n" +
		"     256  copy      1073741824     507.9µs     2114.2   100.0%\n" +
		"     256  pack      1073741824     558.8µs     1921.7    90.9%\n" +
		"   65536  memcpy2d  1073741824    1.2848ms      835.7    39.6%\n"
	if got := Format(res); got != want {
		t.Errorf("Format:\n%s\nwant:\n%s", got, want)
	}
	if got, want := Format(nil), "     row  op             bytes      median       GB/s  vs copy\n"; got != want {
		t.Errorf("Format(nil) = %q, want the header alone %q", got, want)
	}
}
