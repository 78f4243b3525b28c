package fp8

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
)

// SplitWhole splits an element box (a rank's part of the tensor) into the
// box of the blocks it holds whole and the boxes of the blocks it cuts. A
// block lies wholly inside box when box holds every element of it (blocks
// at the tensor's bottom and right edges are partial, and whole when box
// reaches the edge): its amax is the box's own, so a rank can quantize it
// in one pass, with no exchange (the fused kernel on a GPU). A block box
// cuts has elements on other ranks: its amax needs the partial amaxes of
// every rank that holds part of it (the exchange), then a second pass.
//
// whole is the largest box of whole blocks inside box (empty, with box's
// Lo, when there is none); cut holds at most four disjoint boxes, which with
// whole cover box exactly, each touching only blocks that box cuts. In
// Row mode every row is a block, so only a part that splits the last dim
// cuts any; in Tensor mode a block is a whole matrix, so a part cuts it
// unless it holds the whole matrix: a sharded matrix needs one amax pass
// (and the exchange) before any element can be quantized, whatever the
// kernel.
func (g Grid) SplitWhole(box placement.Box) (whole placement.Box, cut []placement.Box, err error) {
	if err := g.checkBox("box", box); err != nil {
		return placement.Box{}, nil, err
	}
	nd := g.nd
	whole = cloneBox(box)
	if box.Empty() {
		return whole, nil, nil
	}
	rd, cd := nd-2, nd-1
	inner := func(d int, b int64) (lo, hi int64) {
		// lo rounded up to a block edge without overflow: past the
		// tensor's last block edge it is the tensor's end
		lo = box.Lo[d] / b * b
		if lo < box.Lo[d] {
			if lo > g.shape[d]-b {
				lo = g.shape[d]
			} else {
				lo += b
			}
		}
		hi = box.Hi[d]
		if hi != g.shape[d] {
			hi = hi / b * b
		}
		return lo, max(lo, hi)
	}
	r0, r1 := inner(rd, g.rows)
	c0, c1 := inner(cd, g.cols)
	if r0 >= r1 || c0 >= c1 {
		whole.Hi[rd] = whole.Lo[rd]
		return whole, []placement.Box{cloneBox(box)}, nil
	}
	whole.Lo[rd], whole.Hi[rd], whole.Lo[cd], whole.Hi[cd] = r0, r1, c0, c1
	piece := func(rlo, rhi, clo, chi int64) {
		if rlo < rhi && clo < chi {
			b := cloneBox(box)
			b.Lo[rd], b.Hi[rd], b.Lo[cd], b.Hi[cd] = rlo, rhi, clo, chi
			cut = append(cut, b)
		}
	}
	piece(box.Lo[rd], r0, box.Lo[cd], box.Hi[cd]) // the rows above the whole blocks
	piece(r1, box.Hi[rd], box.Lo[cd], box.Hi[cd]) // below
	piece(r0, r1, box.Lo[cd], c0)                 // left
	piece(r0, r1, c1, box.Hi[cd])                 // right
	return whole, cut, nil
}

// WholeBlocks reports whether box holds every block it touches whole
// (SplitWhole gives no cut box), and says why not.
func (g Grid) WholeBlocks(box placement.Box) error {
	_, cut, err := g.SplitWhole(box)
	if err != nil {
		return err
	}
	if len(cut) > 0 {
		return fmt.Errorf("fp8: box %v cuts blocks of %dx%d (the elements of %v lie in blocks with elements outside it)", box, g.rows, g.cols, cut[0])
	}
	return nil
}

// ScalesLocal reports whether a tensor moving from layout src to layout dst
// (over ranks 0 to world-1), converted with this grid, needs no exchange
// of amaxes: every rank's nonempty source part holds every block it
// touches whole (SplitWhole cuts none) and every nonempty destination part
// lies inside the same rank's source part, so that the blocks a rank packs
// and those of its scale tensor are all whole in its own part and it can
// scale them alone, in one pass. Colocated calls whose layouts agree are
// such, and so are parts on multiples of the block size where each
// generator rank also holds its trainer part. It depends on the layouts
// alone, so every rank derives the same answer.
func (g Grid) ScalesLocal(src, dst placement.Layout, world int) (bool, error) {
	for r := range world {
		sbox, ok := src.RankBox(r)
		ok = ok && !sbox.Empty()
		if ok {
			_, cut, err := g.SplitWhole(sbox)
			if err != nil {
				return false, err
			}
			if len(cut) > 0 {
				return false, nil
			}
		}
		if dbox, in := dst.RankBox(r); in && !dbox.Empty() && (!ok || !sbox.Contains(dbox)) {
			return false, nil
		}
	}
	return true, nil
}
