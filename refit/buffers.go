package refit

import (
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// partNeed is what one side of one tensor needs of this rank's buffer:
// whether the rank holds a part, the bytes the buffer must have (exactly,
// for a dense part; at least, for a view), and where the part's bytes sit
// in it (for the aliasing check).
type partNeed struct {
	in    bool
	want  int64
	exact bool
	at    strided.Desc // the whole part through its view
}

// partNeeds derives, once, what this rank's buffers must be for the
// schedule's tensors under views (nil: dense).
func partNeeds(s *reshard.Schedule, rank int, views []program.TensorViews) ([][2]partNeed, error) {
	out := make([][2]partNeed, len(s.Plans))
	for i, p := range s.Plans {
		var tv program.TensorViews
		if i < len(views) {
			tv = views[i]
		}
		for side, l := range []placement.Layout{p.Src(), p.Dst()} {
			v := tv.Src
			if side == 1 {
				v = tv.Dst
			}
			box, in := l.RankBox(rank)
			n := partNeed{in: in, exact: v.Dense()}
			if !in {
				out[i][side] = n
				continue
			}
			n.want = l.LocalBytes(rank)
			if !n.exact {
				ext, err := v.Extent(box.Shape())
				if err != nil {
					return nil, &BufferError{Rank: rank, Tensor: s.TensorName(i), Side: program.SideName(side), Why: err.Error(), Got: -1}
				}
				n.want = ext * l.ElemSize()
			}
			if !box.Empty() {
				n.at = strided.DescribeView(box, box, l.ElemSize(), v)
			}
			out[i][side] = n
		}
	}
	return out, nil
}

// checkBuffers validates one rank's buffers against what the parts need.
func checkBuffers(s *reshard.Schedule, rank int, needs [][2]partNeed, bufs []TensorBuffers) error {
	if len(bufs) != len(needs) {
		return fmt.Errorf("refit: %d buffer pairs for a schedule of %d tensors", len(bufs), len(needs))
	}
	for i := range needs {
		for side, b := range []transport.Buffer{bufs[i].Src, bufs[i].Dst} {
			n := needs[i][side]
			name := program.SideName(side)
			switch {
			case n.in && b == nil:
				return &BufferError{Rank: rank, Tensor: s.TensorName(i), Side: name, Why: "is missing (the rank is in the mesh)", Want: n.want, Got: -1}
			case !n.in && b != nil && b.Len() != 0:
				return &BufferError{Rank: rank, Tensor: s.TensorName(i), Side: name, Why: "is given but the rank is not in the mesh", Want: 0, Got: b.Len()}
			case n.in && b.Len() < n.want:
				return &BufferError{Rank: rank, Tensor: s.TensorName(i), Side: name, Why: "is too short", Want: n.want, Got: b.Len()}
			case n.in && n.exact && b.Len() > n.want:
				return &BufferError{Rank: rank, Tensor: s.TensorName(i), Side: name, Why: "is too long", Want: n.want, Got: b.Len()}
			}
		}
	}
	return nil
}

// BufferError reports a local buffer that does not match its layout.
type BufferError struct {
	Rank      int
	Tensor    string // the tensor's name
	Side      string // "source" or "destination"
	Why       string
	Want, Got int64 // bytes; Got is -1 for a missing buffer
}

func (e *BufferError) Error() string {
	if e.Got < 0 {
		return fmt.Sprintf("rank %d, tensor %q: %s buffer %s (want %d bytes)", e.Rank, e.Tensor, e.Side, e.Why, e.Want)
	}
	return fmt.Sprintf("rank %d, tensor %q: %s buffer %s: %d bytes, the layout needs %d", e.Rank, e.Tensor, e.Side, e.Why, e.Got, e.Want)
}

// checkRunBuffers checks one step's buffers on this rank: sizes against
// the layouts and views, and no two parts' bytes in the same place. The
// aliasing check is skipped when the buffers are the ones the last good
// check saw (the common case: a trainer refits the same weights every
// step).
func (c *Call) checkRunBuffers(mem transport.Memory, bufs []TensorBuffers) error {
	if err := checkBuffers(c.sched, c.rank, c.needs, bufs); err != nil {
		return err
	}
	if err := c.checkScaleBuffers(mem, bufs); err != nil {
		return err
	}
	keys := make([]bufferKey, 0, 3*len(bufs))
	known := true // every buffer's addresses are known
	for i := range bufs {
		for _, b := range []transport.Buffer{bufs[i].Src, bufs[i].Dst, bufs[i].Scale} {
			k := keyOf(mem, b, i)
			known = known && k.spec < 0
			keys = append(keys, k)
		}
	}
	if known && slices.Equal(keys, c.checked) {
		return nil
	}
	if err := checkAliasing(mem, c.rank, c.specs, c.needs, c.scaleNeeds(), bufs); err != nil {
		return err
	}
	if known {
		c.checked = keys
	}
	return nil
}

// checkAliasing fails when the bytes two parts of this rank occupy
// overlap: buffers that share memory, or views of one buffer that meet.
// Parts whose spans do not overlap are told apart by their spans alone;
// only overlapping spans (views into one fused buffer) are compared run
// by run.
func checkAliasing(mem transport.Memory, rank int, specs []Spec, needs [][2]partNeed, scales []int64, bufs []TensorBuffers) error {
	ad, ok := mem.(transport.Addresser)
	if !ok {
		return nil
	}
	type part struct {
		base, lo, hi uintptr
		at           strided.Desc
		what         string
	}
	var parts []part
	for i := range specs {
		for side, b := range []transport.Buffer{bufs[i].Src, bufs[i].Dst} {
			n := needs[i][side]
			if b == nil || !n.in || n.at.Bytes() == 0 {
				continue
			}
			base, _, ok := ad.AddressRange(b)
			if !ok {
				continue
			}
			last := n.at.Offset
			for k, c := range n.at.Count {
				last += (c - 1) * n.at.Stride[k]
			}
			parts = append(parts, part{base: base, lo: base + uintptr(n.at.Offset), hi: base + uintptr(last+n.at.Run), at: n.at,
				what: fmt.Sprintf("the %s part of tensor %q", program.SideName(side), specs[i].Name)})
		}
		if i < len(scales) && scales[i] > 0 && bufs[i].Scale != nil {
			if base, _, ok := ad.AddressRange(bufs[i].Scale); ok {
				parts = append(parts, part{base: base, lo: base, hi: base + uintptr(scales[i]), at: strided.Desc{Run: scales[i]},
					what: fmt.Sprintf("the scales of tensor %q", specs[i].Name)})
			}
		}
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a].lo < parts[b].lo })
	type run struct {
		lo, hi uintptr
		what   string
	}
	for i := 0; i < len(parts); {
		// a group of parts whose spans overlap one another
		j, hi := i+1, parts[i].hi
		for j < len(parts) && parts[j].lo < hi {
			hi = max(hi, parts[j].hi)
			j++
		}
		if j-i > 1 {
			var runs []run
			for _, pt := range parts[i:j] {
				pt.at.ForEachRun(func(off int64) {
					runs = append(runs, run{pt.base + uintptr(off), pt.base + uintptr(off+pt.at.Run), pt.what})
				})
			}
			sort.Slice(runs, func(a, b int) bool { return runs[a].lo < runs[b].lo })
			for k := 1; k < len(runs); k++ {
				if runs[k].lo < runs[k-1].hi {
					return fmt.Errorf("rank %d: %s and %s overlap in memory; every part of a call must have bytes of its own",
						rank, runs[k-1].what, runs[k].what)
				}
			}
		}
		i = j
	}
	return nil
}

// scaleNeeds returns the size of every spec's scale buffer on this rank (0:
// none), or nil when no spec converts.
func (c *Call) scaleNeeds() []int64 {
	if c.quant == nil {
		return nil
	}
	out := make([]int64, len(c.quant))
	for i, q := range c.quant {
		if q != nil {
			out[i] = max(q.scaleBytes, 0)
		}
	}
	return out
}

// checkScaleBuffers checks every spec's TensorBuffers.Scale on this rank,
// and that the memory can quantize when a spec converts.
func (c *Call) checkScaleBuffers(mem transport.Memory, bufs []TensorBuffers) error {
	for i := range bufs {
		b := bufs[i].Scale
		var q *quantTensor
		if c.quant != nil {
			q = c.quant[i]
		}
		name := c.specs[i].Name
		switch {
		case (q == nil || q.scaleBytes < 0) && b != nil && b.Len() != 0:
			why := "is given but the tensor does not convert to FP8"
			if q != nil {
				why = "is given but the rank is not in the destination mesh"
			}
			return &BufferError{Rank: c.rank, Tensor: name, Side: "scale", Why: why, Want: 0, Got: b.Len()}
		case q == nil || q.scaleBytes <= 0:
		case b == nil:
			return &BufferError{Rank: c.rank, Tensor: name, Side: "scale", Why: "is missing (the tensor converts to FP8 and the rank is in the destination mesh)", Want: q.scaleBytes, Got: -1}
		case b.Len() < q.scaleBytes:
			return &BufferError{Rank: c.rank, Tensor: name, Side: "scale", Why: "is too short", Want: q.scaleBytes, Got: b.Len()}
		case b.Len() > q.scaleBytes:
			return &BufferError{Rank: c.rank, Tensor: name, Side: "scale", Why: "is too long", Want: q.scaleBytes, Got: b.Len()}
		}
	}
	if c.quant == nil {
		return nil
	}
	if _, ok := mem.(transport.QuantMemory); !ok {
		return fmt.Errorf("rank %d: the call converts tensors to FP8, but memory %T cannot quantize (it is not a reshard.QuantMemory)", c.rank, mem)
	}
	if _, ok := mem.(transport.HostIO); !ok {
		return fmt.Errorf("rank %d: the call converts tensors to FP8, but memory %T cannot write scales (it is not a reshard.HostIO)", c.rank, mem)
	}
	return nil
}

// bufferKey identifies a buffer: by its address range where the memory
// can tell (spec -1), else by the spec it was passed for; a nil buffer is
// noBuffer.
type bufferKey struct {
	lo, hi uintptr
	spec   int
}

var noBuffer = bufferKey{spec: -2}

func keyOf(mem transport.Memory, b transport.Buffer, spec int) bufferKey {
	if b == nil {
		return noBuffer
	}
	if ad, ok := mem.(transport.Addresser); ok {
		if lo, hi, ok := ad.AddressRange(b); ok {
			return bufferKey{lo: lo, hi: hi, spec: -1}
		}
	}
	return bufferKey{spec: spec}
}
