package replaytest

// Self-scaled cases (Env.Self): the heap holds each rank's scale window,
// destination scale tensor and check flag, and RunCase checks them.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// selfState is what a rank of a self-scaled case holds in the heap beside
// its tensor buffers.
type selfState struct {
	scaleDst, flag replay.Span
	dstBlocks      placement.Box
	nan            bool // the rank's source part holds the NaN (Env.NaN)
}

// nanIndex is the element Env.NaN makes a NaN: the middle of the tensor.
func nanIndex(shape []int64) []int64 {
	idx := make([]int64, len(shape))
	for d, n := range shape {
		idx[d] = n / 2
	}
	return idx
}

// pointBox is the box of the one element idx.
func pointBox(idx []int64) placement.Box {
	b := placement.Box{Lo: slices.Clone(idx), Hi: slices.Clone(idx)}
	for d := range b.Hi {
		b.Hi[d]++
	}
	return b
}

// poisonNaN writes a NaN over nanIndex's element in rank's source part
// host (placed through view v), reporting whether the part holds it.
func poisonNaN(c transporttest.Case, rank int, host []byte, v placement.View) (bool, error) {
	box, _ := c.Src.RankBox(rank)
	pt := pointBox(nanIndex(c.Src.Shape()))
	if !box.Contains(pt) || box.Empty() {
		return false, nil
	}
	esz := c.Src.ElemSize()
	at := strided.DescribeView(box, pt, esz, v)
	if at.Offset+esz > int64(len(host)) {
		return false, fmt.Errorf("replaytest: the NaN's byte %d outside a part of %d bytes", at.Offset, len(host))
	}
	switch c.Src.DType() {
	case dtype.BF16:
		binary.LittleEndian.PutUint16(host[at.Offset:], 0x7FC0)
	default:
		binary.LittleEndian.PutUint32(host[at.Offset:], math.Float32bits(float32(math.NaN())))
	}
	return true, nil
}

// selfScales allocates in heap rank's scale window, destination scale
// tensor, FP8 part buffer (replay.FP8PartNeeds) and flag, and sets bufs'
// Quant, SelfScales and Flag for a plan that scales the case itself.
func selfScales(heap Heap, c transporttest.Case, mode fp8.Mode, rank int, prog *program.Program, views program.TensorViews, bufs *replay.Buffers, nan bool) (selfState, error) {
	st := selfState{nan: nan}
	g, err := fp8.NewGrid(c.Src.Shape(), mode)
	if err != nil {
		return st, err
	}
	box, ok := c.Src.RankBox(rank)
	if !ok || box.Empty() {
		return st, nil
	}
	q := replay.QuantTensor{Grid: g, DType: c.Src.DType(), Self: true, Part: box,
		PartAt: strided.DescribeView(box, box, c.Src.ElemSize(), views.Src)}
	if q.Blocks, err = g.Blocks(box); err != nil {
		return st, err
	}
	if q.Scales, err = heap.Alloc(4 * q.Blocks.Elems()); err != nil {
		return st, err
	}
	if dbox, in := c.Dst.RankBox(rank); in && !dbox.Empty() {
		if q.DstBlocks, err = g.Blocks(dbox); err != nil {
			return st, err
		}
		if q.ScaleDst, err = heap.Alloc(4 * q.DstBlocks.Elems()); err != nil {
			return st, err
		}
		st.scaleDst, st.dstBlocks = q.ScaleDst, q.DstBlocks
	}
	bufs.Quant = []replay.QuantTensor{q}
	if n := replay.FP8PartNeeds(prog, bufs.Quant)[0]; n > 0 {
		if bufs.Quant[0].FP8Part, err = heap.Alloc(n); err != nil {
			return st, err
		}
	}
	bufs.SelfScales = q.Scales
	if st.flag, err = heap.Alloc(4); err != nil {
		return st, err
	}
	bufs.Flag = st.flag
	return st, nil
}

// check checks, after the step, what a self-scaled rank's plan wrote
// beside the tensor: its destination scale tensor (those of quantizing
// the whole tensor) and its flag (set exactly where a NaN is in play).
func (st selfState) check(heap Heap, c transporttest.Case, mode fp8.Mode, rank int, nanRun bool) error {
	if st.flag.Len == 0 {
		return nil
	}
	fb := make([]byte, 4)
	if err := heap.Read(st.flag, fb); err != nil {
		return err
	}
	flagged := binary.LittleEndian.Uint32(fb) >= 0x7F800000
	dbox, _ := c.Dst.RankBox(rank)
	dstNaN := false
	if nanRun {
		dstNaN = !dbox.Empty() && dbox.Contains(pointBox(nanIndex(c.Src.Shape())))
	}
	switch {
	case flagged && !st.nan:
		return fmt.Errorf("rank %d: the check flag shows a non-finite scale (%#08x), but its source part is finite", rank, binary.LittleEndian.Uint32(fb))
	case !flagged && dstNaN:
		return fmt.Errorf("rank %d: its destination part holds a NaN, but the check flag (%#08x) shows none", rank, binary.LittleEndian.Uint32(fb))
	case st.nan || dstNaN || st.dstBlocks.Empty():
		return nil
	}
	got := make([]byte, st.scaleDst.Len)
	if err := heap.Read(st.scaleDst, got); err != nil {
		return err
	}
	_, w, err := pattern.WantFP8(c.Src.DType(), c.Src.Shape(), mode, dbox, 0)
	if err != nil {
		return err
	}
	if want := w.AppendBits(nil); !slices.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("rank %d: its scale tensor over blocks %v differs from quantizing the whole tensor's at byte %d of %d", rank, st.dstBlocks, i, len(want))
	}
	return nil
}

// Fuse runs q with the host oracle: the amaxes of q.Box's blocks (whole)
// into t's window in the heap as scales, then transport.HostMemory's
// QuantPack with them.
func (at Bytes) Fuse(t replay.QuantTensor, q replay.QuantOp) error {
	src, err := at(q.Src)
	if err != nil {
		return err
	}
	if err := t.Grid.WholeBlocks(q.Box); err != nil {
		return fmt.Errorf("replaytest: a Fuse of blocks it does not hold whole: %w", err)
	}
	part, err := t.Grid.WindowFor(q.Box)
	if err != nil {
		return err
	}
	if err := t.Grid.Amax(part, fp8.Region{DType: t.DType, Data: src, At: q.SrcAt, Box: q.Box}); err != nil {
		var nf *fp8.NonFiniteError
		if !errors.As(err, &nf) {
			return err
		}
		// as the kernel does, the scales come out NaN (the bytes are
		// not checked)
		for i := range part.Values {
			part.Values[i] = float32(math.NaN())
		}
		return at.writeWindow(t, part)
	}
	if err := part.ToScales(); err != nil {
		return err
	}
	if err := at.writeWindow(t, part); err != nil {
		return err
	}
	return at.pack(t, q, part)
}

// writeWindow writes the values of part into t's window in the heap.
func (at Bytes) writeWindow(t replay.QuantTensor, part fp8.Window) error {
	w, err := at.readWindow(t)
	if err != nil {
		return err
	}
	if err := w.CopyFrom(part); err != nil {
		return err
	}
	return at.Write(t.Scales, w.AppendBits(nil))
}

// Check writes at flag the largest magnitude among the float32s of the n
// bytes at src, as float32 bits.
func (at Bytes) Check(src uint64, n int64, flag uint64) error {
	b := make([]byte, n)
	if err := at.Read(replay.Span{Addr: src, Len: n}, b); err != nil {
		return err
	}
	var m uint32
	for i := 0; i+4 <= len(b); i += 4 {
		m = max(m, binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF)
	}
	return at.Write(replay.Span{Addr: flag, Len: 4}, binary.LittleEndian.AppendUint32(nil, m))
}
