package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// MaxDims is the most outer dimensions a Strided descriptor may have.
const MaxDims = 7

// ErrBadStrided is wrapped by every error about a malformed Strided
// descriptor or a pair that does not fit together.
var ErrBadStrided = errors.New("cuda: bad strided descriptor")

// Strided says where a box's bytes sit in a buffer: Offset bytes to the first
// byte; Run bytes in one contiguous run; Count[i] and Stride[i] (bytes) for up
// to MaxDims outer dimensions, outermost first. Count may be empty: one run.
//
// The runs are visited in row-major order of their indices (the last outer
// dimension fastest), and that order is the order of the bytes in the packed,
// contiguous form: run k of the descriptor is bytes [k*Run, (k+1)*Run) there.
//
// A box [lo, hi) of a dense row-major tensor with shape S and element size e
// is Offset = e*sum(lo[i]*rowStride[i]), Run = e*(hi[n-1]-lo[n-1]),
// Count = hi[:n-1]-lo[:n-1], Stride = e*rowStride[:n-1].
type Strided struct {
	Offset int64
	Run    int64
	Count  []int64
	Stride []int64
}

// Contiguous returns the descriptor of n bytes at offset 0: the packed form.
func Contiguous(n int64) Strided { return Strided{Run: n} }

// maxBytes bounds sizes and addresses so that no sum or product in this
// package overflows int64.
const maxBytes = 1 << 60

// Validate checks the descriptor's own shape: non-negative fields, matching
// Count and Stride lengths, at most MaxDims dimensions, and a byte range that
// fits in 2^60.
func (d Strided) Validate() error {
	if d.Offset < 0 || d.Run < 0 {
		return fmt.Errorf("%w: offset %d, run %d: must not be negative", ErrBadStrided, d.Offset, d.Run)
	}
	if len(d.Count) != len(d.Stride) {
		return fmt.Errorf("%w: %d counts but %d strides", ErrBadStrided, len(d.Count), len(d.Stride))
	}
	if len(d.Count) > MaxDims {
		return fmt.Errorf("%w: %d outer dimensions, at most %d", ErrBadStrided, len(d.Count), MaxDims)
	}
	empty := false
	for i, c := range d.Count {
		if c < 0 || d.Stride[i] < 0 {
			return fmt.Errorf("%w: dimension %d: count %d, stride %d: must not be negative", ErrBadStrided, i, c, d.Stride[i])
		}
		empty = empty || c == 0
	}
	if empty {
		return nil // describes no bytes
	}
	total, end := uint64(d.Run), uint64(d.Offset)+uint64(d.Run)
	for i, c := range d.Count {
		hi, lo := bits.Mul64(total, uint64(c))
		if hi != 0 || lo > maxBytes {
			return fmt.Errorf("%w: more than 2^60 bytes", ErrBadStrided)
		}
		total = lo
		hi, lo = bits.Mul64(uint64(c-1), uint64(d.Stride[i]))
		if hi != 0 || lo > maxBytes {
			return fmt.Errorf("%w: dimension %d spans more than 2^60 bytes", ErrBadStrided, i)
		}
		end += lo
	}
	if total > maxBytes || end > maxBytes {
		return fmt.Errorf("%w: more than 2^60 bytes", ErrBadStrided)
	}
	return nil
}

// Bytes returns the number of bytes described: Run times the product of
// Count. The descriptor must be valid.
func (d Strided) Bytes() int64 {
	n := d.Run
	for _, c := range d.Count {
		n *= c
	}
	return n
}

// Extent returns one past the last byte the descriptor touches, so a buffer
// of Extent bytes holds it; 0 when it describes no bytes. The descriptor must
// be valid.
func (d Strided) Extent() int64 {
	if d.Bytes() == 0 {
		return 0
	}
	end := d.Offset + d.Run
	for i, c := range d.Count {
		end += (c - 1) * d.Stride[i]
	}
	return end
}

// checkDisjoint returns an error unless the descriptor's runs are pairwise
// disjoint, which a destination needs (two runs writing one byte would race).
// It checks a sufficient condition that every box of a dense tensor meets, in
// any dimension order: with the dimensions of count > 1 sorted by stride,
// each stride is at least the extent of everything inside it.
func (d Strided) checkDisjoint() error {
	if d.Bytes() == 0 {
		return nil
	}
	type dim struct{ count, stride int64 }
	var ds []dim
	for i, c := range d.Count {
		if c > 1 {
			ds = append(ds, dim{c, d.Stride[i]})
		}
	}
	slices.SortStableFunc(ds, func(a, b dim) int { return cmpInt64(a.stride, b.stride) })
	extent := d.Run
	for _, x := range ds {
		if x.stride < extent {
			return fmt.Errorf("%w: destination runs overlap (stride %d < extent %d)", ErrBadStrided, x.stride, extent)
		}
		extent = x.stride*(x.count-1) + extent
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// forEachRun calls f with the offset of each run, in packed order.
func (d Strided) forEachRun(f func(off int64)) {
	if d.Bytes() == 0 {
		return
	}
	idx := make([]int64, len(d.Count))
	for {
		off := d.Offset
		for i, k := range idx {
			off += k * d.Stride[i]
		}
		f(off)
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < d.Count[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}
