package placement

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/internal/checked"
)

// View says where a rank's local part of a tensor sits inside a local
// buffer that may hold more than that part, as a strided view does in
// PyTorch: local element (i_0, ..., i_{n-1}) of the part (indices relative
// to the part's own corner, over its local shape) sits at element
//
//	Offset + i_0*Strides[0] + ... + i_{n-1}*Strides[n-1]
//
// of the buffer, counted in elements of the tensor's dtype. Real trainers
// and generators hold fused weights this way: vLLM's qkv_proj keeps a
// rank's q rows, then its k rows, then its v rows in one buffer, so the k
// part of that rank is a view with Offset = (q rows)*hidden and dense
// strides.
//
// The zero View (Strides nil, Offset 0) is the default: the part is dense
// and row-major in a buffer of exactly its size. The innermost dim must
// have stride 1 when it has more than one index (rows stay contiguous, so
// that transports move whole runs); strides must be positive; and the
// view's elements must not overlap each other.
type View struct {
	Offset  int64   // elements before the part's first element
	Strides []int64 // elements between consecutive indices of each local dim; nil: dense row-major
}

// Dense reports whether v is the default, dense row-major view.
func (v View) Dense() bool { return v.Offset == 0 && v.Strides == nil }

// DenseView returns the row-major view of a part of the given local shape
// at offset elements into its buffer. The strides fit in an int64 for every
// part of a Layout (NewLayout checks the tensor's span); for a shape whose
// span (the product of its dims, 0 counting as 1) overflows, the strides
// that would overflow saturate at math.MaxInt64, and Extent reports the
// overflow as an error.
func DenseView(shape []int64, offset int64) View {
	st := make([]int64, len(shape))
	acc := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = acc
		next, ok := checked.Mul(acc, max(shape[d], 1))
		if !ok {
			next = math.MaxInt64
		}
		acc = next
	}
	return View{Offset: offset, Strides: st}
}

// ResolvedStrides returns v's strides for a part of the given local shape:
// v.Strides, or the dense row-major strides when they are nil.
func (v View) ResolvedStrides(shape []int64) []int64 {
	if v.Strides != nil {
		return slices.Clone(v.Strides)
	}
	return DenseView(shape, 0).Strides
}

// Extent returns how many elements of its buffer the view reaches: one
// past its last element (0 for an empty part). A buffer must hold at least
// Extent elements.
func (v View) Extent(shape []int64) (int64, error) {
	st := v.ResolvedStrides(shape)
	last := v.Offset
	for d, n := range shape {
		if n == 0 {
			return 0, nil
		}
		step, ok := checked.Mul(n-1, st[d])
		if !ok {
			return 0, fmt.Errorf("view %v of a %s part: element offset overflows int64", v, FormatShape(shape))
		}
		if last, ok = checked.Add(last, step); !ok {
			return 0, fmt.Errorf("view %v of a %s part: element offset overflows int64", v, FormatShape(shape))
		}
	}
	if last == math.MaxInt64 {
		return 0, fmt.Errorf("view %v of a %s part: element offset overflows int64", v, FormatShape(shape))
	}
	return last + 1, nil
}

// Validate checks v against a part of the given local shape: one stride
// per dim, positive strides, a unit innermost stride, a non-negative
// offset, and no two elements at the same place (each dim's stride steps
// over everything the dims inside it span, in some order of the dims).
func (v View) Validate(shape []int64) error {
	if v.Strides == nil {
		if v.Offset < 0 {
			return fmt.Errorf("view offset %d is negative", v.Offset)
		}
		return nil
	}
	if len(v.Strides) != len(shape) {
		return fmt.Errorf("view has %d strides for a %d-dim part", len(v.Strides), len(shape))
	}
	if v.Offset < 0 {
		return fmt.Errorf("view offset %d is negative", v.Offset)
	}
	for d, s := range v.Strides {
		if s <= 0 {
			return fmt.Errorf("view stride %d of dim %d is not positive", s, d)
		}
	}
	if n := len(shape); n > 0 && shape[n-1] > 1 && v.Strides[n-1] != 1 {
		return fmt.Errorf("view stride %d of the innermost dim, want 1 (rows must be contiguous)", v.Strides[n-1])
	}
	// Overlap: sort the dims that have more than one index by stride; each
	// stride must be at least the span of the dims below it.
	type ds struct{ n, s int64 }
	var dims []ds
	for d, n := range shape {
		if n > 1 {
			dims = append(dims, ds{n, v.Strides[d]})
		}
	}
	slices.SortFunc(dims, func(a, b ds) int { return cmp.Compare(a.s, b.s) })
	span := int64(1)
	for _, x := range dims {
		if x.s < span {
			return fmt.Errorf("view strides %v make elements of a %s part overlap", v.Strides, FormatShape(shape))
		}
		ext, ok := checked.Mul(x.n-1, x.s)
		if ok {
			span, ok = checked.Add(ext, span)
		}
		if !ok {
			return fmt.Errorf("view strides %v of a %s part overflow int64", v.Strides, FormatShape(shape))
		}
	}
	_, err := v.Extent(shape)
	return err
}

func (v View) String() string {
	if v.Strides == nil {
		return fmt.Sprintf("+%d dense", v.Offset)
	}
	return fmt.Sprintf("+%d strides %v", v.Offset, v.Strides)
}
