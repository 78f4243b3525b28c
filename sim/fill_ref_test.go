package sim

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refFill is fill as it was before the caps joined the links' heap: every
// cap listed with its level, the list sorted by level (ties in listing
// order), and the caps frozen one at a time against the heap's top. Kept
// as the reference TestFillMatchesReference checks fill against.
func refFill(f *fabric) {
	type refCap struct {
		level float64
		g     int32
		in    bool
	}
	var caplist []refCap
	f.gepoch++
	f.touched = f.touched[:0]
	f.heap = f.heap[:0]
	inf := math.Inf(1)
	ep := f.epoch
	ls, groups, level := f.ls, f.groups, f.level
	seen := map[int32]bool{}
	for _, l := range f.region {
		ls[l] = linkScratch{rem: f.caps[l], newLvl: inf}
	}
	for _, l := range f.region {
		for _, a := range f.adj[l] {
			g := a.g
			if seen[g] {
				continue
			}
			seen[g] = true
			gr := &groups[g]
			gr.nr = -1
			f.touched = append(f.touched, g)
			m := float64(gr.m)
			if lo := &ls[gr.out]; f.lstamp[gr.out] == ep {
				lo.cnt += m
			} else if lv := level[gr.out]; lv < inf {
				caplist = append(caplist, refCap{lv, g, false})
			}
			if li := &ls[gr.in]; f.lstamp[gr.in] == ep {
				li.cnt += m
			} else if lv := level[gr.in]; lv < inf {
				caplist = append(caplist, refCap{lv, g, true})
			}
		}
	}
	slices.SortStableFunc(caplist, func(a, b refCap) int { return cmp.Compare(a.level, b.level) })
	for _, l := range f.region {
		if x := &ls[l]; x.cnt > 0 {
			f.heap.push(lentry{key: x.rem / x.cnt, tie: int64(l)})
		}
	}
	level0 := 0.0
	ci := 0
	for {
		for len(f.heap) > 0 {
			top := f.heap[0]
			x := &ls[top.tie]
			if x.fixed || x.cnt == 0 {
				f.heap.pop()
				continue
			}
			k := math.Max(x.rem/x.cnt, level0)
			if k > top.key {
				f.heap[0].key = k
				heapDown(f.heap, 0)
				continue
			}
			break
		}
		for ci < len(caplist) && groups[caplist[ci].g].nr >= 0 {
			ci++
		}
		if len(f.heap) == 0 {
			break
		}
		if ci < len(caplist) && caplist[ci].level <= f.heap[0].key {
			c := caplist[ci]
			ci++
			level0 = math.Max(level0, c.level)
			f.freeze(c.g, c.level, c.in)
			continue
		}
		top := f.heap.pop()
		l := int32(top.tie)
		level0 = math.Max(level0, top.key)
		x := &ls[l]
		x.fixed = true
		x.newLvl = top.key
		for _, a := range f.adj[l] {
			g := a.g
			if groups[g].nr < 0 {
				f.freeze(g, top.key, groups[g].in == l)
			}
		}
	}
}

// TestFillMatchesReference runs fill and refFill on the same regions of
// random fabrics (after each event's solve, a few regions of random links)
// and wants the same touched groups (in any order), the same rates within
// 1e-9 relative and the same region levels.
func TestFillMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fills, caps := 0, 0
	for trial := 0; trial < 200; trial++ {
		outs, ins := 3+rng.IntN(10), 3+rng.IntN(10)
		n := outs + ins
		capacity := make([]float64, n)
		for i := range capacity {
			capacity[i] = float64(1 + rng.IntN(4))
			if trial%2 == 1 {
				capacity[i] = 0.5 + 3*rng.Float64() // no ties
			}
		}
		f := newFabric(capacity)
		for ev := 0; ev < 60; ev++ {
			out, in := int32(rng.IntN(outs)), int32(outs+rng.IntN(ins))
			g := f.groupFor(out, in, 0)
			if gr := &f.groups[g]; gr.m > 0 && rng.IntN(3) == 0 {
				gr.m--
				if gr.m == 0 {
					f.drop(g)
				}
			} else {
				gr.m += int32(1 + rng.IntN(3))
			}
			f.solve([]int32{out, in}, func(int32, float64, bool) {})
			for r := 0; r < 3; r++ {
				f.epoch++
				f.region = f.region[:0]
				for k := 1 + rng.IntN(4); k > 0; k-- {
					f.addRegion(int32(rng.IntN(n)))
				}
				f.fill()
				type got struct {
					g    int32
					nr   float64
					nbIn bool
				}
				want := map[int32]got{}
				for _, g := range f.touched {
					want[g] = got{g, f.groups[g].nr, f.groups[g].nbIn}
				}
				lv := make([]float64, len(f.region))
				for i, l := range f.region {
					lv[i] = f.ls[l].newLvl
				}
				refFill(f)
				fills++
				if len(f.touched) != len(want) {
					t.Fatalf("trial %d event %d: fill touched %d groups, the reference %d", trial, ev, len(want), len(f.touched))
				}
				for _, g := range f.touched {
					w, ok := want[g]
					s := f.groups[g]
					if !ok || relChange(w.nr, s.nr, 1e-9) || w.nbIn != s.nbIn {
						t.Fatalf("trial %d event %d: group %d rate %g (in-bound %v, listed %v), the reference's %g (%v)", trial, ev, g, w.nr, w.nbIn, ok, s.nr, s.nbIn)
					}
					gr := f.groups[g]
					if !f.inRegion(gr.out) || !f.inRegion(gr.in) {
						caps++
					}
				}
				for i, l := range f.region {
					if a, b := lv[i], f.ls[l].newLvl; a != b && relChange(a, b, 1e-9) {
						t.Fatalf("trial %d event %d: link %d level %g, the reference %g", trial, ev, l, a, b)
					}
				}
			}
		}
	}
	if caps < fills {
		t.Errorf("%d capped groups in %d fills: the trials test too little", caps, fills)
	}
}
