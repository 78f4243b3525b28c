package cuda

import (
	"math/rand/v2"

	"github.com/m2n-dev/m2n/strided"
)

// Random descriptors for the tests, here and in the GPU tests of package
// cuda_test (exported from a _test file, so only tests see them).

// RandomBox returns the descriptor of a random box [lo, hi) of a random dense
// row-major tensor of rank 1 to 5, with an element size of 1 to 16 bytes, at
// a random byte offset, and the size of a buffer that holds it. The outer
// dimensions may come permuted (a transposed view); some boxes are empty. A
// quarter of the boxes are 16-byte aligned throughout, and some have long
// runs that the kernels split into chunks.
func RandomBox(r *rand.Rand) (d strided.Desc, bufLen int64) {
	rank := 1 + r.IntN(5)
	elem := []int64{1, 2, 3, 4, 8, 16}[r.IntN(6)]
	pad := int64(r.IntN(40))
	if r.IntN(4) == 0 {
		elem, pad = 16, 16*int64(r.IntN(3))
	}
	shape := make([]int64, rank)
	for i := range shape {
		shape[i] = 1 + int64(r.IntN(6))
	}
	if r.IntN(8) == 0 {
		shape[rank-1] = 1000 + int64(r.IntN(2000))
	}
	lo, hi := make([]int64, rank), make([]int64, rank)
	for i, n := range shape {
		lo[i] = int64(r.IntN(int(n)))
		hi[i] = lo[i] + 1 + int64(r.IntN(int(n-lo[i])))
	}
	if r.IntN(16) == 0 {
		i := r.IntN(rank)
		hi[i] = lo[i] // an empty box
	}
	rowStride := make([]int64, rank)
	s := elem
	for i := rank - 1; i >= 0; i-- {
		rowStride[i] = s
		s *= shape[i]
	}
	d.Offset = pad
	for i := range rank {
		d.Offset += lo[i] * rowStride[i]
	}
	d.Run = elem * (hi[rank-1] - lo[rank-1])
	for i := range rank - 1 {
		d.Count = append(d.Count, hi[i]-lo[i])
		d.Stride = append(d.Stride, rowStride[i])
	}
	if r.IntN(3) == 0 {
		r.Shuffle(len(d.Count), func(i, j int) {
			d.Count[i], d.Count[j] = d.Count[j], d.Count[i]
			d.Stride[i], d.Stride[j] = d.Stride[j], d.Stride[i]
		})
	}
	return d, pad + s
}

// RandomDisjoint returns a random descriptor of exactly total bytes with
// disjoint runs (so it may be a destination): a random run dividing total,
// up to four outer dimensions in random order with random gaps between runs,
// at a random offset; and the size of a buffer that holds it.
func RandomDisjoint(r *rand.Rand, total int64) (d strided.Desc, bufLen int64) {
	if total == 0 {
		return strided.Desc{Offset: int64(r.IntN(9)), Run: int64(r.IntN(5)), Count: []int64{0}, Stride: []int64{7}}, 32
	}
	divisors := func(n int64) []int64 {
		var ds []int64
		for k := int64(1); k*k <= n; k++ {
			if n%k == 0 {
				ds = append(ds, k, n/k)
			}
		}
		return ds
	}
	ds := divisors(total)
	d.Run = ds[r.IntN(len(ds))]
	rows := total / d.Run
	extent := d.Run
	var counts, strides []int64
	for n := 0; rows > 1 && n < 4; n++ {
		c := rows
		if n < 3 {
			cs := divisors(rows)
			c = cs[r.IntN(len(cs))]
		}
		if c == 1 {
			continue
		}
		stride := extent + int64(r.IntN(3))*int64([]int{1, 8, 16}[r.IntN(3)])
		counts = append([]int64{c}, counts...)
		strides = append([]int64{stride}, strides...)
		extent = stride*(c-1) + extent
		rows /= c
	}
	if rows != 1 {
		counts = append([]int64{rows}, counts...)
		strides = append([]int64{extent}, strides...)
		extent *= rows
	}
	d.Count, d.Stride = counts, strides
	r.Shuffle(len(d.Count), func(i, j int) {
		d.Count[i], d.Count[j] = d.Count[j], d.Count[i]
		d.Stride[i], d.Stride[j] = d.Stride[j], d.Stride[i]
	})
	d.Offset = int64(r.IntN(24))
	return d, d.Offset + extent
}
