package replay

import (
	"fmt"

	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// copiesAfter reports whether round i's copies may run on the side stream,
// after its packs and groups: it has both, no byte its copies write is a
// byte its sends read, and no byte its copies read is a byte its receives
// write. It returns the round's spans.
func (bd *builder) copiesAfter(i int) (bool, roundSpansOf, error) {
	s := &bd.p.Rounds[i]
	if len(s.Copies) == 0 || len(s.Sends)+len(s.Recvs) == 0 {
		return false, roundSpansOf{}, nil
	}
	sp, err := bd.roundSpans(i)
	if err != nil {
		return false, sp, err
	}
	for _, v := range sp.copyWr {
		if sp.sendRd.overlaps(v) {
			return false, sp, nil
		}
	}
	for _, v := range sp.copyRd {
		if sp.recvWr.overlaps(v) {
			return false, sp, nil
		}
	}
	return true, sp, nil
}

// copies emits round i's local copies in waves.
func (bd *builder) copies(i int) error {
	s := &bd.p.Rounds[i]
	if len(s.Copies) == 0 {
		return nil
	}
	var ops []copyOp
	scratch := uint64(0)
	for _, cp := range s.Copies {
		from := make([]uint64, len(cp.From))
		to := make([]uint64, len(cp.To))
		for k, r := range cp.From {
			a, err := bd.region(s.Index, "local copy", r)
			if err != nil {
				return err
			}
			from[k] = a
		}
		for k, r := range cp.To {
			a, err := bd.region(s.Index, "local copy", r)
			if err != nil {
				return err
			}
			to[k] = a
		}
		if bd.fusedAtStart(cp) {
			continue
		}
		if cp.Quant && len(cp.To) == 1 && cp.To[0].At.Bytes() == cp.Bytes {
			// one destination region: quantize (or copy the part's
			// E4M3 bytes) straight into it, not through the scratch
			o, ok, err := bd.quantInto(s.Index, cp, to[0])
			if err != nil {
				return err
			}
			if ok {
				ops = append(ops, o)
				continue
			}
		}
		if pairs(cp) {
			o := copyOp{}
			for k := range cp.From {
				c := Copy{Dst: to[k], DstAt: cp.To[k].At, Src: from[k], SrcAt: cp.From[k].At}
				o.items = append(o.items, c)
				o.rd = append(o.rd, span(c.Src, c.SrcAt))
				o.wr = append(o.wr, span(c.Dst, c.DstAt))
			}
			ops = append(ops, o)
			continue
		}
		// through the scratch: pack every source region, then unpack into
		// every destination region (the second op reads what the first
		// wrote, so it lands in a later wave).
		if bd.b.Scratch.Len < int64(scratch)+cp.Bytes {
			return fmt.Errorf("replay: rank %d, round %d: local copy scratch of %d bytes, the round needs %d",
				bd.p.Rank, s.Index, bd.b.Scratch.Len, int64(scratch)+cp.Bytes)
		}
		base := bd.b.Scratch.Addr + scratch
		pack, unpack := copyOp{}, copyOp{}
		off := int64(0)
		if cp.Quant {
			q, c, _, err := bd.quantOp(s.Index, "local copy", cp.Msg, cp.From, base)
			if err != nil {
				return err
			}
			pack.add(q, c)
			off = cp.Bytes
		}
		for k, r := range cp.From {
			if cp.Quant {
				break // quantized above
			}
			c := Copy{Dst: base, DstAt: strided.Desc{Offset: off, Run: r.At.Bytes()}, Src: from[k], SrcAt: r.At}
			pack.items = append(pack.items, c)
			pack.rd = append(pack.rd, span(c.Src, c.SrcAt))
			pack.wr = append(pack.wr, span(c.Dst, c.DstAt))
			off += r.At.Bytes()
		}
		off = 0
		for k, r := range cp.To {
			c := Copy{Dst: to[k], DstAt: r.At, Src: base, SrcAt: strided.Desc{Offset: off, Run: r.At.Bytes()}}
			unpack.items = append(unpack.items, c)
			unpack.rd = append(unpack.rd, span(c.Src, c.SrcAt))
			unpack.wr = append(unpack.wr, span(c.Dst, c.DstAt))
			off += r.At.Bytes()
		}
		if off != cp.Bytes {
			return fmt.Errorf("replay: rank %d, round %d: local copy of %d bytes writes %d", bd.p.Rank, s.Index, cp.Bytes, off)
		}
		scratch += uint64(cp.Bytes)
		ops = append(ops, pack, unpack)
	}
	bd.waves(i, ops)
	return nil
}

// quantInto resolves a local copy that converts to FP8 and has one
// destination region, dst's: a Quantize or Fuse writing straight into it
// when the region is one run, a copy out of the tensor's FP8Part into it
// (whatever its strides) for a staged self-scaled tensor; ok is false
// where neither applies (the copy goes through the scratch).
func (bd *builder) quantInto(round int, cp program.Copy, dst uint64) (o copyOp, ok bool, err error) {
	at := cp.To[0].At
	q, c, _, err := bd.quantOp(round, "local copy", cp.Msg, cp.From, dst+uint64(at.Offset))
	switch {
	case err != nil:
		return o, false, err
	case c != nil:
		c.Dst, c.DstAt = dst, at
	case !at.Contiguous():
		return o, false, nil
	}
	o.add(q, c)
	return o, true, nil
}

// copyOp is one or more items of a local copy (or a quantize-while-packing
// instead of items) that read rd and write wr.
type copyOp struct {
	items  []Copy
	quant  *QuantOp
	rd, wr []ival
}

// add adds to o the quantize q or the copy c (one of them is set).
func (o *copyOp) add(q *QuantOp, c *Copy) {
	if c != nil {
		o.items = append(o.items, *c)
		o.rd = append(o.rd, span(c.Src, c.SrcAt))
		o.wr = append(o.wr, span(c.Dst, c.DstAt))
		return
	}
	o.quant = q
	o.rd = append(o.rd, span(q.Src, q.SrcAt))
	o.wr = append(o.wr, span(q.Dst, strided.Desc{Run: q.Box.Elems()}))
}

// waves emits round i's copy operations in waves: an operation that reads
// bytes an earlier one of the wave writes, or writes bytes one reads,
// starts a new wave (a launch after it).
func (bd *builder) waves(i int, ops []copyOp) {
	if len(ops) == 0 {
		return // every copy was fused at the start
	}
	k := -1
	var rd, wr spans
	var quants []QuantOp // the wave's
	flush := func() {
		bd.launch(i, k)
		for _, q := range quants {
			bd.quantize(i, q)
		}
		quants = quants[:0]
	}
	for _, o := range ops {
		conflict := false
		for _, r := range o.rd {
			conflict = conflict || wr.overlaps(r)
		}
		for _, w := range o.wr {
			conflict = conflict || rd.overlaps(w)
		}
		if k < 0 || conflict {
			if k >= 0 {
				flush()
			}
			k = bd.newBatch()
			rd, wr = nil, nil
		}
		for _, c := range o.items {
			bd.add(k, c)
		}
		if o.quant != nil {
			quants = append(quants, *o.quant)
		}
		for _, r := range o.rd {
			rd.insert(r)
		}
		for _, w := range o.wr {
			wr.insert(w)
		}
	}
	flush()
}
