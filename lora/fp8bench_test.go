package lora

import (
	"math"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

// BenchmarkMergeFP8 merges rank-16 adapters into one rank's 1024 x 4096
// FP8 weight part (block scales: 8 x 32 blocks of 128 x 128), from its
// base, and reports ns per weight element.
func BenchmarkMergeFP8(b *testing.B) {
	const rows, cols, r = 1024, 4096, 16
	src, a, bb := benchInputs(rows, cols, r)
	q, err := fp8.Quantize(dtype.BF16, []int64{rows, cols}, fp8.Block, src)
	if err != nil {
		b.Fatal(err)
	}
	scales := make([]byte, 0, 4*len(q.Scales))
	for _, s := range q.Scales {
		u := math.Float32bits(s)
		scales = append(scales, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	wl := layout2(rows, cols)
	wl, err = placement.NewLayout(wl.Shape(), dtype.FP8E4M3, wl.Mesh(), wl.Placements())
	if err != nil {
		b.Fatal(err)
	}
	w := Matrix{Layout: wl, Rank: 0, Buf: q.Data, Scales: scales, Mode: fp8.Block}
	am := Matrix{Layout: layout2(r, cols), Rank: 0, Buf: a}
	bm := Matrix{Layout: layout2(rows, r), Rank: 0, Buf: bb}
	mg := NewMerger()
	if err := mg.Merge("w", w, am, bm, 0.5); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := mg.Merge("w", w, am, bm, 0.5); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(rows*cols), "ns/elem")
}
