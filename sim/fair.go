package sim

import "math"

// fabric holds the links and the flows on them and keeps the flows' rates
// max-min fair.
//
// Flows that use the same pair of links (a sender's out link and a
// receiver's in link) always get the same max-min rate, so they are kept as
// one group: a count of members, one per-member rate, and the service S
// (bytes each member has received so far). A member that joined at service
// S0 with b bytes completes when S reaches S0+b; a group's next completion
// is its smallest such key.
//
// Rates follow progressive filling: every unfrozen flow's rate grows at the
// same pace until a link saturates, which freezes the flows on it. The state
// is kept as each link's level (the rate of the flows it froze, +Inf for a
// link that never saturates); a flow's rate is the lower level of its two
// links. After an event only a region of links is refilled: the links the
// event touched, with each flow that leaves the region capped at the level
// of its outside link. The region grows by the outside links whose
// conditions broke (a saturated link whose flows' rates changed, an
// unsaturated one pushed over capacity) until none do, and after a few
// rounds of growth it becomes the whole connected component. The result is
// the exact max-min allocation (up to a relative tolerance of 1e-9 on rates),
// at a cost that follows the region rather than the whole fabric.
type fabric struct {
	caps  []float64
	level []float64
	sum   []float64    // current total rate of each link
	adj   [][]adjEntry // active groups on each link
	bytes []float64    // bytes each link has carried, up to lt
	lt    []float64    // [link] when its sum last changed (its bytes' time)
	vt    []float64    // [link] virtual service at vtT (vtime.go)
	vtT   []float64
	now   float64 // the time of the current event (the engine's)
	ser   *series // the links' series, or nil

	groups []group
	gpos   []groupPos         // [group]
	serv   []service          // [group]
	mem    []minHeap[float64] // [group] its members, by (key, msg)
	free   []int32
	index  map[uint64]int32

	// solve scratch: per link (ls) and per group (group.nr, nbIn), each
	// kept in one record so that a fill's visit to a link or a group reads
	// one line
	epoch   uint32
	ls      []linkScratch
	lstamp  []uint32 // [link] the solve (epoch) whose region holds it: a small array apart, read for every group a fill lists
	dsum    []float64
	dstamp  []uint32
	depoch  uint32
	add     []int32
	unsat   []int32
	gepoch  uint32
	region  []int32
	touched []int32
	changed []int32
	caplist []capEntry
	chead   []int32  // [link] an outside link's first cap in caplist
	cstamp  []uint32 // [link] the fill (gepoch) that listed chead
	heap    minHeap[struct{}]
	capq    minHeap[struct{}] // the fill's outside links that cap, by (level, tie)
	stats   fairStats
	// growths is how many times a region may grow before it becomes its
	// whole connected component.
	growths int
}

type fairStats struct {
	solves       int64
	regionLinks  int64
	closures     int64
	rateChanges  int64
	maxGroups    int
	maxRegion    int
	expansionRun int64
}

// linkScratch is a link's state during a solve (in the region when its lstamp
// is the epoch): the fill's remaining capacity, unfrozen flows, saturation and new level.
type linkScratch struct {
	rem, cnt, newLvl float64
	used             float64 // the frozen groups' total rate
	fixed            bool
}

// adjEntry is a group in a link's list: the group and its other link, as
// o where the list's link is the group's out link, as ^o (negative) where
// it is its in link, and whether the group is bound at the list's link
// (its boundIn says this side; solve's commit keeps the two alike), so
// that a walk over a link's groups knows each one's other link, side and
// bound without reading the group.
type adjEntry struct {
	g, o int32
	here bool
}

// other returns the entry's other link and whether the list's link is the
// group's in link.
func (a adjEntry) other() (o int32, in bool) {
	if a.o < 0 {
		return ^a.o, true
	}
	return a.o, false
}

// capEntry is a touched group capped by an outside link, in that link's
// list (next: the list's next entry in caplist, -1 at its end).
type capEntry struct {
	g, next int32
	in      bool // the cap is the group's in link
}

// group is the flows on one pair of links: what the solver reads, 32
// bytes so that a visit reads one cache line; where it sits in its links'
// lists is in a groupPos of the same index, the service the engine keeps in
// a service.
type group struct {
	out, in int32
	m       int32
	boundIn bool
	nbIn    bool    // during a solve: whether its in link bounds its new rate
	rate    float64 // per member
	nr      float64 // during a fill: its new rate (-1 until frozen)
}

// groupPos is where a group sits in adj[out] and adj[in], the link it is
// bound at in the engine's virtual time (-1 before its first solve), and
// where it sits in that link's heap (-1: absent).
type groupPos struct {
	out, in    int32
	bind, lpos int32
}

// service is what a group's members have received (32 bytes: the
// members themselves are in the fabric's mem).
type service struct {
	served    float64 // per-member service when its bound link's vt was v0
	servedOut float64 // the part of served while the out link bound the group
	v0        float64
	next      float64 // mem[g][0].key, kept here for the engine's reads
}

// member is a flow in its group's heap: key is the service at which it
// completes, tie its message, val the group's servedOut when it joined.
type member = entry[float64]

func newFabric(caps []float64) *fabric {
	n := len(caps)
	f := &fabric{caps: caps, level: make([]float64, n), sum: make([]float64, n), adj: make([][]adjEntry, n), bytes: make([]float64, n),
		lt: make([]float64, n), vt: make([]float64, n), vtT: make([]float64, n), index: map[uint64]int32{}, growths: maxGrowth, ls: make([]linkScratch, n), lstamp: make([]uint32, n), dsum: make([]float64, n), dstamp: make([]uint32, n),
		chead: make([]int32, n), cstamp: make([]uint32, n)}
	for i := range f.level {
		f.level[i] = math.Inf(1)
	}
	return f
}

func pairKey(out, in int32) uint64 { return uint64(uint32(out))<<32 | uint64(uint32(in)) }

// groupFor returns the live group on (out, in), making one if needed.
func (f *fabric) groupFor(out, in int32, t float64) int32 {
	k := pairKey(out, in)
	if g, ok := f.index[k]; ok {
		return g
	}
	var g int32
	if n := len(f.free); n > 0 {
		g = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		g = int32(len(f.groups))
		f.groups = append(f.groups, group{})
		f.gpos = append(f.gpos, groupPos{})
		f.serv = append(f.serv, service{})
		f.mem = append(f.mem, nil)
	}
	f.groups[g] = group{out: out, in: in}
	f.serv[g] = service{}
	f.mem[g] = f.mem[g][:0]
	f.gpos[g] = groupPos{out: int32(len(f.adj[out])), in: int32(len(f.adj[in])), bind: -1, lpos: -1}
	f.adj[out] = append(f.adj[out], adjEntry{g: g, o: in, here: true}) // boundIn false: bound out
	f.adj[in] = append(f.adj[in], adjEntry{g: g, o: ^out})
	f.index[k] = g
	if live := len(f.groups) - len(f.free); live > f.stats.maxGroups {
		f.stats.maxGroups = live
	}
	return g
}

// drop removes an empty group from its links.
func (f *fabric) drop(g int32) {
	gr, gp := &f.groups[g], &f.gpos[g]
	f.unlink(gr.out, gp.out)
	f.unlink(gr.in, gp.in)
	delete(f.index, pairKey(gr.out, gr.in))
	f.free = append(f.free, g)
}

func (f *fabric) unlink(l int32, pos int32) {
	a := f.adj[l]
	last := int32(len(a) - 1)
	if pos != last {
		moved := a[last]
		a[pos] = moved
		if _, in := moved.other(); !in {
			f.gpos[moved.g].out = pos
		} else {
			f.gpos[moved.g].in = pos
		}
	}
	f.adj[l] = a[:last]
	if len(f.adj[l]) == 0 {
		f.flush(l)
		f.sum[l] = 0
	}
}

// flush adds what link l carried at its current sum since its last change
// to its bytes and its series; it comes before every change of the sum.
func (f *fabric) flush(l int32) {
	if dt := f.now - f.lt[l]; dt > 0 {
		if s := f.sum[l]; s > 0 {
			b := s * dt
			f.bytes[l] += b
			if f.ser != nil {
				f.ser.add(l, f.lt[l], f.now, b)
			}
		}
	}
	f.lt[l] = f.now
}

// push adds a member to group g.
func (f *fabric) push(g int32, m member) {
	f.mem[g].push(m)
	f.serv[g].next = f.mem[g][0].key
}

// pop takes group g's first member out.
func (f *fabric) pop(g int32) member {
	h := &f.mem[g]
	top := h.pop()
	if len(*h) > 0 {
		f.serv[g].next = (*h)[0].key
	}
	return top
}

// lentry is a link in a fill's heap of links by key, ties by link id
// (tie; an outside link that caps as -1-link); stale entries are skipped
// by the caller.
type lentry = entry[struct{}]

const (
	rateTol   = 1e-9  // a rate change below this (relative) does not grow the region
	commitTol = 1e-12 // a rate change below this (relative) is not applied
	maxGrowth = 8     // default region growths before taking the whole component
)

func (f *fabric) inRegion(l int32) bool { return f.lstamp[l] == f.epoch }

func (f *fabric) addRegion(l int32) {
	if f.lstamp[l] != f.epoch {
		f.lstamp[l] = f.epoch
		f.region = append(f.region, l)
	}
}

// relChange reports whether rate b differs from a by more than tol of the
// larger (rates are never negative or NaN, so this is
// math.Abs(b-a) > tol*math.Max(b, a) without the calls).
func relChange(a, b, tol float64) bool {
	d, m := b-a, b
	if d < 0 {
		d, m = -d, a
	}
	return d > tol*m
}

// solve makes the rates max-min fair again after the groups on the seed
// links changed, calling change(g, rate, boundIn) for every group whose
// rate or bottleneck changes (before the new rate is stored).
func (f *fabric) solve(seeds []int32, change func(g int32, rate float64, boundIn bool)) {
	if len(seeds) == 0 {
		return
	}
	f.stats.solves++
	f.epoch++
	f.region = f.region[:0]
	for _, l := range seeds {
		f.addRegion(l)
	}
	f.predict(0)
	for growth := 0; ; growth++ {
		if growth == f.growths {
			f.closeRegion()
			f.stats.closures++
		}
		f.fill()
		n := len(f.region)
		// a closed region has no outside links: grow only lists the changes
		if !f.grow() || growth >= f.growths {
			break
		}
		f.predict(n)
		f.stats.expansionRun++
	}
	f.stats.regionLinks += int64(len(f.region))
	if len(f.region) > f.stats.maxRegion {
		f.stats.maxRegion = len(f.region)
	}
	// commit: the region's levels and sums (each the total its fill froze),
	// then the changed groups, in the touched order: the engine, and their
	// outside links' sums
	for _, l := range f.region {
		f.tick(l)
		f.level[l] = f.ls[l].newLvl
		f.flush(l)
		f.sum[l] = f.ls[l].used
	}
	ep := f.epoch
	for _, g := range f.changed {
		gr := &f.groups[g]
		nr, nbIn := gr.nr, gr.nbIn
		d := float64(gr.m) * (nr - gr.rate)
		if f.lstamp[gr.out] != ep {
			f.flush(gr.out)
			f.sum[gr.out] += d
		}
		if f.lstamp[gr.in] != ep {
			f.flush(gr.in)
			f.sum[gr.in] += d
		}
		change(g, nr, nbIn)
		gr = &f.groups[g]
		if nbIn != gr.boundIn {
			gp := &f.gpos[g]
			f.adj[gr.out][gp.out].here = !nbIn
			f.adj[gr.in][gp.in].here = nbIn
		}
		gr.rate, gr.boundIn = nr, nbIn
	}
	f.stats.rateChanges += int64(len(f.changed))
}

// predict adds the links a change of the region's levels reaches through
// the groups bound there: a group bound at a region link whose level moves
// moves its own rate, and with it the level of its other link where that
// link is saturated. Growing the region this way before the first fill
// saves the fills that would find those links one at a time; grow still
// finds what it misses (a group that changes bottleneck). It starts at
// region[from:], the links added since it last ran.
func (f *fabric) predict(from int) {
	inf := math.Inf(1)
	for i := from; i < len(f.region); i++ {
		l := f.region[i]
		for _, a := range f.adj[l] {
			if o, _ := a.other(); a.here && f.level[o] < inf {
				f.addRegion(o)
			}
		}
	}
}

// closeRegion grows the region to every link connected to it.
func (f *fabric) closeRegion() {
	for i := 0; i < len(f.region); i++ {
		l := f.region[i]
		for _, a := range f.adj[l] {
			o, _ := a.other() // l is in the region already
			f.addRegion(o)
		}
	}
}

// fill runs progressive filling over the region, flows that leave it capped
// at their outside link's level; it sets nr and nbIn for every touched group
// and newLvl for every region link.
//
// The heap holds the region's links; the outside links that cap a touched
// group are in a heap of their own (capq), as -1-link (ahead of a region
// link of the same level) with their exact level, built at once since
// their keys never change: the fill takes the lesser of the two tops in
// (key, tie) order, the order one heap of both gives, and when a cap comes
// up every unfrozen group it caps freezes at once, at its level.
func (f *fabric) fill() {
	f.gepoch++
	f.touched = f.touched[:0]
	f.caplist = f.caplist[:0]
	f.heap = f.heap[:0]
	f.capq = f.capq[:0]
	inf := math.Inf(1)
	ep := f.epoch
	ls, lstamp, groups, level := f.ls, f.lstamp, f.groups, f.level
	for _, l := range f.region {
		ls[l] = linkScratch{rem: f.caps[l], newLvl: inf}
	}
	for _, l := range f.region {
		// a group whose links are both in the region is listed from its
		// out link
		for _, a := range f.adj[l] {
			o, lIn := a.other()
			oIn := lstamp[o] == ep
			if oIn && lIn {
				continue
			}
			g := a.g
			gr := &groups[g]
			gr.nr = -1
			f.touched = append(f.touched, g)
			m := float64(gr.m)
			if !lIn { // l is the out link (in the region), o the in link
				ls[l].cnt += m
				if oIn {
					ls[o].cnt += m
				} else if lv := level[o]; lv < inf {
					f.addCap(o, lv, g, true)
				}
				continue
			}
			// l is the in link, o the out link (outside the region)
			if lv := level[o]; lv < inf {
				f.addCap(o, lv, g, false)
			}
			ls[l].cnt += m
		}
	}
	// A region link's key is a lower bound of its fair level: freezing a
	// flow at a rate no higher than the link's level only raises the level
	// (rem-v*m)/(cnt-m), so a stale entry is refreshed when it reaches the
	// top instead of on every freeze.
	for _, l := range f.region {
		if x := &ls[l]; x.cnt > 0 {
			f.heap.push(lentry{key: x.rem / x.cnt, tie: int64(l)})
		}
	}
	// the caps in a heap of their own, built at once (a fill that freezes
	// every group before it reaches the last caps pays nothing for them)
	capq := f.capq
	for i := len(capq)/2 - 1; i >= 0; i-- {
		heapDown(capq, i)
	}
	left := len(f.touched) // groups not yet frozen
	level0 := 0.0
	for left > 0 && (len(f.heap) > 0 || len(capq) > 0) {
		if len(capq) > 0 && (len(f.heap) == 0 || before(&capq[0], &f.heap[0])) {
			top := capq.pop()
			if top.key > level0 {
				level0 = top.key
			}
			for c := f.chead[-1-top.tie]; c >= 0; c = f.caplist[c].next {
				if ce := f.caplist[c]; groups[ce.g].nr < 0 {
					f.freeze(ce.g, top.key, ce.in)
					left--
				}
			}
			continue
		}
		top := f.heap[0]
		x := &ls[top.tie]
		if x.fixed || x.cnt == 0 {
			f.heap.pop()
			continue
		}
		k := x.rem / x.cnt
		if k < level0 {
			k = level0
		}
		if k > top.key {
			f.heap[0].key = k
			heapDown(f.heap, 0) // the top's key grew
			continue
		}
		f.heap.pop()
		l := int32(top.tie)
		if top.key > level0 {
			level0 = top.key
		}
		x.fixed = true
		x.newLvl = top.key
		for _, a := range f.adj[l] {
			if groups[a.g].nr < 0 {
				f.freeze(a.g, top.key, a.o < 0)
				left--
			}
		}
	}
}

// addCap lists touched group g as capped by outside link o at level lv,
// putting o in the fill's heap the first time.
func (f *fabric) addCap(o int32, lv float64, g int32, in bool) {
	if f.cstamp[o] != f.gepoch {
		f.cstamp[o] = f.gepoch
		f.chead[o] = -1
		f.capq = append(f.capq, lentry{key: lv, tie: int64(-1 - o)})
	}
	f.caplist = append(f.caplist, capEntry{g: g, next: f.chead[o], in: in})
	f.chead[o] = int32(len(f.caplist) - 1)
}

// freeze fixes group g's rate at v, bound by its in link or its out link,
// and takes its flows off the unfrozen counts of its region links.
func (f *fabric) freeze(g int32, v float64, boundIn bool) {
	gr := &f.groups[g]
	gr.nr, gr.nbIn = v, boundIn
	m := float64(gr.m)
	r := v * m
	f.take(gr.out, r, m)
	f.take(gr.in, r, m)
}

// take adds rate r of m frozen flows to link l's total, and takes them off
// its remaining capacity and unfrozen count while it is not saturated, if
// l is in the region.
func (f *fabric) take(l int32, r, m float64) {
	x := &f.ls[l]
	if f.lstamp[l] != f.epoch {
		return
	}
	x.used += r
	if !x.fixed {
		x.rem -= r
		if x.cnt -= m; x.cnt < 0.5 {
			x.cnt = 0
		}
	}
}

// grow adds the outside links whose conditions the new rates break, and
// reports whether it added any: a saturated link whose flows' rates changed,
// or an unsaturated one the new rates push over its capacity. It lists the
// touched groups whose rate (beyond commitTol) or bound side the fill
// changed in f.changed, for the commit.
func (f *fabric) grow() bool {
	inf := math.Inf(1)
	f.add = f.add[:0]
	f.unsat = f.unsat[:0]
	f.changed = f.changed[:0]
	f.depoch++
	for _, g := range f.touched {
		gr := &f.groups[g]
		nr := gr.nr
		if !relChange(gr.rate, nr, commitTol) {
			if gr.nbIn != gr.boundIn {
				f.changed = append(f.changed, g)
			}
			continue
		}
		f.changed = append(f.changed, g)
		if !relChange(gr.rate, nr, rateTol) {
			continue
		}
		for _, o := range [2]int32{gr.out, gr.in} {
			if f.inRegion(o) {
				continue
			}
			if f.level[o] < inf {
				f.add = append(f.add, o)
				continue
			}
			if f.dstamp[o] != f.depoch {
				f.dstamp[o] = f.depoch
				f.dsum[o] = 0
				f.unsat = append(f.unsat, o)
			}
			f.dsum[o] += float64(gr.m) * (nr - gr.rate)
		}
	}
	for _, o := range f.unsat {
		if f.sum[o]+f.dsum[o] > f.caps[o]*(1+rateTol) {
			f.add = append(f.add, o)
		}
	}
	n := len(f.region)
	for _, o := range f.add {
		f.addRegion(o)
	}
	return len(f.region) > n
}
