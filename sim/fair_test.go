package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// oracleRates is progressive filling done the slow, obvious way over every
// flow: raise all unfrozen flows together until a link is full, freeze the
// flows on it, repeat. flows[i] = {out, in} links; it returns each flow's
// rate.
func oracleRates(caps []float64, flows [][2]int32) []float64 {
	rate := make([]float64, len(flows))
	frozen := make([]bool, len(flows))
	left := len(flows)
	level := 0.0
	for left > 0 {
		// the smallest increment that fills a link
		best := math.Inf(1)
		for l := range caps {
			used, n := 0.0, 0
			for i, f := range flows {
				if f[0] == int32(l) || f[1] == int32(l) {
					if frozen[i] {
						used += rate[i]
					} else {
						used += level
						n++
					}
				}
			}
			if n > 0 {
				best = math.Min(best, (caps[l]-used)/float64(n))
			}
		}
		level += best
		for i := range flows {
			if !frozen[i] {
				rate[i] = level
			}
		}
		// freeze flows on full links
		for l := range caps {
			used, touches := 0.0, false
			for i, f := range flows {
				if f[0] == int32(l) || f[1] == int32(l) {
					used += rate[i]
					touches = touches || !frozen[i]
				}
			}
			if touches && used >= caps[l]*(1-1e-12) {
				for i, f := range flows {
					if !frozen[i] && (f[0] == int32(l) || f[1] == int32(l)) {
						frozen[i] = true
						left--
					}
				}
			}
		}
	}
	return rate
}

func TestFairSharesLikeTheOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var total fairStats
	defer func() {
		if total.expansionRun == 0 || total.closures == 0 {
			t.Errorf("the trials never grew a region (%d) or closed one (%d): they test too little", total.expansionRun, total.closures)
		}
	}()
	for trial := 0; trial < 300; trial++ {
		outs, ins := 2+rng.IntN(6), 2+rng.IntN(6)
		caps := make([]float64, outs+ins)
		for i := range caps {
			caps[i] = float64(1 + rng.IntN(4))
			if rng.IntN(3) == 0 {
				caps[i] = 2 // ties
			}
		}
		f := newFabric(caps)
		f.growths = trial % 3 * 2 // 0: always the whole component, 2, 4
		defer func() {
			total.expansionRun += f.stats.expansionRun
			total.closures += f.stats.closures
		}()
		type flow struct {
			out, in int32
			id      int32
		}
		var live []flow
		nextID := int32(0)
		for ev := 0; ev < 40; ev++ {
			var seeds []int32
			if len(live) == 0 || rng.IntN(3) > 0 {
				fl := flow{out: int32(rng.IntN(outs)), in: int32(outs + rng.IntN(ins)), id: nextID}
				nextID++
				g := f.groupFor(fl.out, fl.in, 0)
				f.push(g, member{key: float64(fl.id), tie: int64(fl.id)})
				f.groups[g].m++
				live = append(live, fl)
				seeds = append(seeds, fl.out, fl.in)
			} else {
				i := rng.IntN(len(live))
				fl := live[i]
				live = append(live[:i], live[i+1:]...)
				g := f.index[pairKey(fl.out, fl.in)]
				gr := &f.groups[g]
				gr.m--
				f.mem[g] = f.mem[g][:len(f.mem[g])-1]
				if gr.m == 0 {
					f.drop(g)
				}
				seeds = append(seeds, fl.out, fl.in)
			}
			f.solve(seeds, func(int32, float64, bool) {})
			flows := make([][2]int32, len(live))
			for i, fl := range live {
				flows[i] = [2]int32{fl.out, fl.in}
			}
			want := oracleRates(caps, flows)
			for i, fl := range live {
				got := f.groups[f.index[pairKey(fl.out, fl.in)]].rate
				if math.Abs(got-want[i]) > 1e-6*want[i] {
					t.Fatalf("trial %d event %d: flow %d (%d->%d) rate %g, oracle %g", trial, ev, i, fl.out, fl.in, got, want[i])
				}
			}
			if err := checkAdj(f); err != nil {
				t.Fatalf("trial %d event %d: %v", trial, ev, err)
			}
			for l := range caps {
				s := 0.0
				for _, a := range f.adj[l] {
					g := a.g
					s += float64(f.groups[g].m) * f.groups[g].rate
				}
				if s > caps[l]*(1+1e-6) {
					t.Fatalf("trial %d event %d: link %d carries %g over its capacity %g", trial, ev, l, s, caps[l])
				}
				if math.Abs(s-f.sum[l]) > 1e-6*caps[l] {
					t.Fatalf("trial %d event %d: link %d sum %g, kept %g", trial, ev, l, s, f.sum[l])
				}
			}
		}
	}
}

func TestFairSimpleShares(t *testing.T) {
	// links 0, 1 out (cap 10 and 4); link 2 in (cap 9).
	f := newFabric([]float64{10, 4, 9})
	add := func(out, in int32) {
		g := f.groupFor(out, in, 0)
		f.push(g, member{key: 1})
		f.groups[g].m++
		f.solve([]int32{out, in}, func(int32, float64, bool) {})
	}
	add(0, 2)
	if r := f.groups[f.index[pairKey(0, 2)]].rate; r != 9 {
		t.Fatalf("one flow: rate %g, want 9 (the in link)", r)
	}
	add(1, 2)
	// fair share of link 2 is 4.5 each; link 1 allows 4, so 4 and 5.
	a, b := f.groups[f.index[pairKey(0, 2)]], f.groups[f.index[pairKey(1, 2)]]
	if a.rate != 5 || b.rate != 4 || !a.boundIn || b.boundIn {
		t.Fatalf("two flows: rates %g (in-bound %v) and %g (in-bound %v), want 5 (in) and 4 (out)", a.rate, a.boundIn, b.rate, b.boundIn)
	}
}

// checkAdj checks every link's list of groups against the groups: each
// entry's other link, side and bound flag (adjEntry) as the group has
// them, and the group's positions (groupPos) pointing at its entries.
func checkAdj(f *fabric) error {
	for l := range f.adj {
		for i, a := range f.adj[l] {
			gr, gp := f.groups[a.g], f.gpos[a.g]
			o, in := a.other()
			switch {
			case in && (gr.in != int32(l) || gr.out != o || gp.in != int32(i)):
				return fmt.Errorf("link %d entry %d: group %d (%d->%d, at %d/%d) listed as in from %d", l, i, a.g, gr.out, gr.in, gp.out, gp.in, o)
			case !in && (gr.out != int32(l) || gr.in != o || gp.out != int32(i)):
				return fmt.Errorf("link %d entry %d: group %d (%d->%d, at %d/%d) listed as out to %d", l, i, a.g, gr.out, gr.in, gp.out, gp.in, o)
			case a.here != (gr.boundIn == in):
				return fmt.Errorf("link %d entry %d: group %d bound in %v, the entry says bound here %v", l, i, a.g, gr.boundIn, a.here)
			}
		}
	}
	return nil
}
