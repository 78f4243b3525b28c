package strided

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// Desc says where a box's bytes sit inside a rank's dense, row-major
// local buffer, without listing them: Rows() runs of Run contiguous bytes,
// the first at byte Offset, the others found by stepping an odometer over
// Count (outermost first) with the byte strides in Stride. Trailing dims that
// the box covers in full are merged into the run, dims of count 1 are
// dropped, and adjacent dims that step evenly are merged, so a box's
// descriptor has at most NDim-1 outer dims and usually far fewer.
type Desc struct {
	Offset int64   // byte offset of the first run
	Run    int64   // bytes in one contiguous run
	Count  []int64 // number of runs along each outer dim, outermost first
	Stride []int64 // byte distance between consecutive runs along each outer dim
}

// ErrInvalid is wrapped by every error about a malformed descriptor or a
// pair of descriptors that do not fit together.
var ErrInvalid = errors.New("strided: invalid descriptor")

// maxBytes bounds sizes and addresses so that no sum or product over a
// valid descriptor overflows int64.
const maxBytes = 1 << 60

// Validate checks the descriptor's own shape: non-negative fields, matching
// Count and Stride lengths, at most 16 outer dims, and a byte range that
// fits in 2^60. The errors wrap ErrInvalid.
func (s Desc) Validate() error {
	if s.Offset < 0 || s.Run < 0 {
		return fmt.Errorf("%w: offset %d, run %d: must not be negative", ErrInvalid, s.Offset, s.Run)
	}
	if len(s.Count) != len(s.Stride) {
		return fmt.Errorf("%w: %d counts but %d strides", ErrInvalid, len(s.Count), len(s.Stride))
	}
	if len(s.Count) > maxOuterDims {
		return fmt.Errorf("%w: %d outer dimensions, at most %d", ErrInvalid, len(s.Count), maxOuterDims)
	}
	empty := false
	for i, c := range s.Count {
		if c < 0 || s.Stride[i] < 0 {
			return fmt.Errorf("%w: dimension %d: count %d, stride %d: must not be negative", ErrInvalid, i, c, s.Stride[i])
		}
		empty = empty || c == 0
	}
	if empty {
		return nil // describes no bytes
	}
	total, end := uint64(s.Run), uint64(s.Offset)+uint64(s.Run)
	for i, c := range s.Count {
		hi, lo := bits.Mul64(total, uint64(c))
		if hi != 0 || lo > maxBytes {
			return fmt.Errorf("%w: more than 2^60 bytes", ErrInvalid)
		}
		total = lo
		hi, lo = bits.Mul64(uint64(c-1), uint64(s.Stride[i]))
		if hi != 0 || lo > maxBytes {
			return fmt.Errorf("%w: dimension %d spans more than 2^60 bytes", ErrInvalid, i)
		}
		end += lo
	}
	if total > maxBytes || end > maxBytes {
		return fmt.Errorf("%w: more than 2^60 bytes", ErrInvalid)
	}
	return nil
}

// maxOuterDims is the most outer dims a descriptor may have (ForEachRun's
// odometer).
const maxOuterDims = 16

// Extent returns one past the last byte the descriptor touches, so that a
// buffer of Extent bytes holds it; 0 when it describes no bytes. The
// descriptor must be valid.
func (s Desc) Extent() int64 {
	if s.Bytes() == 0 {
		return 0
	}
	end := s.Offset + s.Run
	for i, c := range s.Count {
		end += (c - 1) * s.Stride[i]
	}
	return end
}

// Fits returns an error (wrapping ErrInvalid) unless every run of the
// descriptor lies inside a buffer of size bytes; a descriptor of no bytes
// fits anywhere.
func (s Desc) Fits(size int64) error {
	if s.Bytes() == 0 {
		return nil
	}
	if s.Offset < 0 || s.Run < 0 {
		return fmt.Errorf("%w: %v: offset and run must not be negative", ErrInvalid, s)
	}
	if e := s.Extent(); e > size {
		return fmt.Errorf("%w: %v reaches byte %d of a buffer of %d bytes", ErrInvalid, s, e, size)
	}
	return nil
}

// CheckDisjoint returns an error (wrapping ErrInvalid) unless the
// descriptor's runs are pairwise disjoint, which a destination needs (two
// runs writing one byte would race on a GPU). It checks a sufficient
// condition that every box of a dense tensor meets, in any dimension
// order: with the dims of count > 1 sorted by stride, each stride is at
// least the extent of everything inside it.
func (s Desc) CheckDisjoint() error {
	if s.Bytes() == 0 {
		return nil
	}
	type dim struct{ count, stride int64 }
	var ds []dim
	for i, c := range s.Count {
		if c > 1 {
			ds = append(ds, dim{c, s.Stride[i]})
		}
	}
	slices.SortStableFunc(ds, func(a, b dim) int { return cmp.Compare(a.stride, b.stride) })
	extent := s.Run
	for _, x := range ds {
		if x.stride < extent {
			return fmt.Errorf("%w: destination runs overlap (stride %d < extent %d)", ErrInvalid, x.stride, extent)
		}
		extent = x.stride*(x.count-1) + extent
	}
	return nil
}

// Rows returns the number of contiguous runs. Descriptors of boxes of a
// Layout always fit in an int64; for any other descriptor whose count
// overflows, Rows saturates at math.MaxInt64 (CheckedBytes reports it).
func (s Desc) Rows() int64 {
	n := int64(1)
	for _, c := range s.Count {
		n = checked.SatMul(n, max(c, 0))
	}
	return n
}

// Bytes returns the number of bytes described, saturating at
// math.MaxInt64 like Rows.
func (s Desc) Bytes() int64 { return checked.SatMul(s.Rows(), max(s.Run, 0)) }

// CheckedBytes returns the number of bytes described, or an error naming
// the descriptor when a count or the run is negative or the product
// overflows int64.
func (s Desc) CheckedBytes() (int64, error) {
	if s.Run < 0 {
		return 0, fmt.Errorf("reshard: descriptor %v has a negative run", s)
	}
	n := s.Run
	for _, c := range s.Count {
		var ok bool
		if c < 0 {
			return 0, fmt.Errorf("reshard: descriptor %v has a negative count", s)
		}
		if n, ok = checked.Mul(n, c); !ok {
			return 0, fmt.Errorf("reshard: descriptor %v describes more bytes than an int64 counts", s)
		}
	}
	return n, nil
}

// Contiguous reports whether the bytes form a single run.
func (s Desc) Contiguous() bool { return len(s.Count) == 0 }

// String renders the descriptor as "@64 run 32 x [4/128 2/1024]": offset,
// run length, and count/stride per outer dim.
func (s Desc) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "@%d run %d", s.Offset, s.Run)
	if len(s.Count) > 0 {
		b.WriteString(" x [")
		for i := range s.Count {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d/%d", s.Count[i], s.Stride[i])
		}
		b.WriteByte(']')
	}
	return b.String()
}

// ForEachRun calls fn with the byte offset of every run, in order.
func (s Desc) ForEachRun(fn func(off int64)) {
	if len(s.Count) == 0 {
		fn(s.Offset)
		return
	}
	var idx [16]int64
	for _, c := range s.Count {
		if c == 0 {
			return
		}
	}
	off := s.Offset
	outer := len(s.Count) - 1
	for {
		fn(off)
		d := outer
		for ; d >= 0; d-- {
			idx[d]++
			off += s.Stride[d]
			if idx[d] < s.Count[d] {
				break
			}
			off -= s.Stride[d] * s.Count[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// Describe returns where the bytes of sub sit inside a dense row-major
// buffer that holds the region local, with elem bytes per element. It panics
// if sub is empty or not inside local.
func Describe(local, sub placement.Box, elem int64) Desc {
	nd := len(local.Lo)
	var shape, rel, count [placement.MaxTensorDims]int64
	for d := 0; d < nd; d++ {
		if sub.Lo[d] < local.Lo[d] || sub.Hi[d] > local.Hi[d] || sub.Hi[d] <= sub.Lo[d] {
			panic(fmt.Sprintf("reshard: box %v is empty or not inside %v", sub, local))
		}
		shape[d] = local.Hi[d] - local.Lo[d]
		rel[d] = sub.Lo[d] - local.Lo[d]
		count[d] = sub.Hi[d] - sub.Lo[d]
	}
	return DescribeInto(shape[:nd], rel[:nd], count[:nd], elem, nil)
}

// describe builds the descriptor of the sub-box [rel, rel+count) of a dense
// row-major buffer of shape local, with elem bytes per element. Every count
// must be positive. scratch provides storage for Count and Stride (2*len(local)
// values) and may be nil.
func DescribeInto(local, rel, count []int64, elem int64, scratch []int64) Desc {
	nd := len(local)
	// stride of dim d in elements.
	offset := int64(0)
	stride := int64(1)
	run := elem
	// k is the innermost dim not merged into the run.
	k := nd - 1
	merging := true
	var strides [16]int64
	for d := nd - 1; d >= 0; d-- {
		strides[d] = stride
		offset += rel[d] * stride
		if merging {
			run *= count[d]
			k = d - 1
			merging = count[d] == local[d]
		}
		stride *= local[d]
	}
	s := Desc{Offset: offset * elem, Run: run}
	s.Count, s.Stride = outerDims(count, strides[:nd], k, elem, scratch)
	return s
}

// outerDims lists dims 0..k of a box (its counts, and the buffer's strides
// in elements) as a descriptor's Count and Stride in bytes: dims of one
// index add nothing, and a dim merges into the one outside it where that
// steps exactly over it. Both are nil when no dim is left. scratch backs
// them if it holds 2*(k+1) values.
func outerDims(count, strides []int64, k int, elem int64, scratch []int64) (cnt, str []int64) {
	if k < 0 {
		return nil, nil
	}
	if cap(scratch) < 2*(k+1) {
		scratch = make([]int64, 2*(k+1))
	}
	cnt = scratch[0 : 0 : k+1]
	str = scratch[k+1 : k+1 : 2*(k+1)]
	for d := 0; d <= k; d++ {
		if count[d] == 1 {
			continue
		}
		st := strides[d] * elem
		if n := len(cnt); n > 0 && str[n-1] == count[d]*st {
			// the previous outer dim steps exactly over this one: merge.
			cnt[n-1] *= count[d]
			str[n-1] = st
			continue
		}
		cnt = append(cnt, count[d])
		str = append(str, st)
	}
	if len(cnt) == 0 {
		return nil, nil
	}
	return cnt, str
}

// DescribeView is Describe for a part held through a view: where the bytes
// of sub sit in a buffer that holds the region local as the view v places
// it (placement.View, in elements), with elem bytes per element. Runs merge
// as far as the view keeps them contiguous. For the default view it equals
// Describe. It panics if sub is empty or not inside local.
func DescribeView(local, sub placement.Box, elem int64, v placement.View) Desc {
	if v.Dense() {
		return Describe(local, sub, elem)
	}
	nd := len(local.Lo)
	shape := local.Shape()
	st := v.ResolvedStrides(shape)
	var count [placement.MaxTensorDims]int64
	offset := v.Offset
	for d := 0; d < nd; d++ {
		if sub.Lo[d] < local.Lo[d] || sub.Hi[d] > local.Hi[d] || sub.Hi[d] <= sub.Lo[d] {
			panic(fmt.Sprintf("reshard: box %v is empty or not inside %v", sub, local))
		}
		count[d] = sub.Hi[d] - sub.Lo[d]
		offset += (sub.Lo[d] - local.Lo[d]) * st[d]
	}
	// Merge inner dims into the run while each steps exactly over it;
	// dims of one index add nothing.
	run := int64(1) // elements
	k := nd - 1
	for ; k >= 0; k-- {
		if count[k] == 1 {
			continue
		}
		if st[k] != run {
			break
		}
		run *= count[k]
	}
	s := Desc{Offset: offset * elem, Run: run * elem}
	s.Count, s.Stride = outerDims(count[:nd], st, k, elem, nil)
	return s
}
