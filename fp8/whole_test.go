package fp8

import (
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/placement"
)

// TestSplitWhole: the whole box and the cut boxes cover the box exactly,
// without overlap; every block the whole box touches lies inside the box,
// and every block a cut box touches has elements outside it.
func TestSplitWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 1))
	for i := range 3000 {
		nd := 2 + r.IntN(2)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + int64(r.IntN(600))
			if r.IntN(3) == 0 {
				shape[d] = 128 * (1 + int64(r.IntN(4)))
			}
		}
		mode := Mode(1 + r.IntN(3))
		g, err := NewGrid(shape, mode)
		if err != nil {
			t.Fatal(err)
		}
		box := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
		for d, n := range shape {
			lo, hi := int64(r.IntN(int(n))), n
			if r.IntN(2) == 0 {
				lo = min(n-1, 128*int64(r.IntN(int(n/128)+1)))
			}
			if r.IntN(2) == 0 {
				hi = lo + 1 + int64(r.IntN(int(n-lo)))
			}
			if r.IntN(3) == 0 {
				lo, hi = 0, n
			}
			box.Lo[d], box.Hi[d] = lo, hi
		}
		whole, cut, err := g.SplitWhole(box)
		if err != nil {
			t.Fatal(err)
		}
		covered := whole.Elems()
		for _, c := range cut {
			covered += c.Elems()
			if !inside(c, box) {
				t.Fatalf("case %d: cut box %v outside %v", i, c, box)
			}
			if overlap(c, whole) {
				t.Fatalf("case %d: cut box %v overlaps the whole box %v", i, c, whole)
			}
			eachBlock(t, g, c, func(bb placement.Box) {
				if inside(bb, box) {
					t.Fatalf("case %d (%v %v, box %v): cut box %v touches block %v, which is whole", i, shape, mode, box, c, bb)
				}
			})
		}
		if covered != box.Elems() || !inside(whole, box) {
			t.Fatalf("case %d: whole %v and cut %v do not cover %v", i, whole, cut, box)
		}
		eachBlock(t, g, whole, func(bb placement.Box) {
			if !inside(bb, box) {
				t.Fatalf("case %d: whole box %v touches block %v, which %v cuts", i, whole, bb, box)
			}
		})
		if err := g.WholeBlocks(whole); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if (g.WholeBlocks(box) == nil) != (len(cut) == 0) {
			t.Fatalf("case %d: WholeBlocks disagrees with SplitWhole", i)
		}
	}
}

func overlap(a, b placement.Box) bool {
	if a.Empty() || b.Empty() {
		return false
	}
	for d := range a.Lo {
		if max(a.Lo[d], b.Lo[d]) >= min(a.Hi[d], b.Hi[d]) {
			return false
		}
	}
	return true
}

func inside(a, b placement.Box) bool {
	if a.Empty() {
		return true
	}
	for d := range a.Lo {
		if a.Lo[d] < b.Lo[d] || a.Hi[d] > b.Hi[d] {
			return false
		}
	}
	return true
}

// eachBlock calls fn with the element box of every block box touches.
func eachBlock(t *testing.T, g Grid, box placement.Box, fn func(placement.Box)) {
	t.Helper()
	if box.Empty() {
		return
	}
	blocks, err := g.Blocks(box)
	if err != nil {
		t.Fatal(err)
	}
	nd := len(blocks.Lo)
	one := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
	for d := nd - 2; d < nd; d++ {
		one.Lo[d], one.Hi[d] = blocks.Lo[d], blocks.Lo[d]+1
	}
	for bi := blocks.Lo[nd-2]; bi < blocks.Hi[nd-2]; bi++ {
		for bj := blocks.Lo[nd-1]; bj < blocks.Hi[nd-1]; bj++ {
			b := placement.Box{Lo: append([]int64(nil), box.Lo...), Hi: append([]int64(nil), box.Hi...)}
			b.Lo[nd-2], b.Hi[nd-2] = bi, bi+1
			b.Lo[nd-1], b.Hi[nd-1] = bj, bj+1
			for d := range nd - 2 {
				b.Lo[d], b.Hi[d] = 0, 1 // leading dims do not matter
			}
			eb, err := g.BlockBox(b)
			if err != nil {
				t.Fatal(err)
			}
			for d := range nd - 2 {
				eb.Lo[d], eb.Hi[d] = box.Lo[d], box.Hi[d]
			}
			fn(eb)
		}
	}
}
