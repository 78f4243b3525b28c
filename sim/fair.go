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
	sum   []float64 // current total rate of each link
	adj   [][]int32 // active groups on each link
	bytes []float64 // bytes each link has carried

	groups []group
	serv   []service // [group]
	free   []int32
	index  map[uint64]int32

	// solve scratch
	epoch   uint32
	lstamp  []uint32
	rem     []float64
	cnt     []float64
	fixed   []bool
	newLvl  []float64
	dsum    []float64
	dstamp  []uint32
	depoch  uint32
	add     []int32
	unsat   []int32
	gepoch  uint32
	gstamp  []uint32
	nr      []float64
	nbIn    []bool
	region  []int32
	touched []int32
	caplist []capEntry
	heap    lheap
	caps2   capSorter
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

type capEntry struct {
	level float64
	g     int32
	in    bool // the cap is the group's in link
}

// group is the flows on one pair of links: what the solver reads, kept
// small so that a fill's walk over the groups stays in cache; the service
// the engine keeps is in a service of the same index.
type group struct {
	out, in int32
	posOut  int32 // index in adj[out]
	posIn   int32 // index in adj[in]
	m       int32
	boundIn bool
	live    bool
	rate    float64 // per member
}

// service is what a group's members have received.
type service struct {
	served    float64 // per-member service at tLast
	servedOut float64 // the part of served while the out link bound the group
	tLast     float64
	next      float64  // mem[0].key, kept beside the heap for the engine's reads
	mem       []member // min-heap by (key, msg)
}

type member struct {
	key  float64 // service at which the member completes
	out0 float64 // servedOut when it joined
	msg  int32
}

func newFabric(caps []float64) *fabric {
	n := len(caps)
	f := &fabric{caps: caps, level: make([]float64, n), sum: make([]float64, n), adj: make([][]int32, n), bytes: make([]float64, n),
		index: map[uint64]int32{}, growths: maxGrowth, lstamp: make([]uint32, n), rem: make([]float64, n), cnt: make([]float64, n),
		fixed: make([]bool, n), newLvl: make([]float64, n), dsum: make([]float64, n), dstamp: make([]uint32, n)}
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
		f.serv = append(f.serv, service{})
		f.gstamp = append(f.gstamp, 0)
		f.nr = append(f.nr, 0)
		f.nbIn = append(f.nbIn, false)
	}
	gr := &f.groups[g]
	*gr = group{out: out, in: in, live: true}
	sv := &f.serv[g]
	*sv = service{tLast: t, mem: sv.mem[:0]}
	gr.posOut = int32(len(f.adj[out]))
	f.adj[out] = append(f.adj[out], g)
	gr.posIn = int32(len(f.adj[in]))
	f.adj[in] = append(f.adj[in], g)
	f.index[k] = g
	if live := len(f.groups) - len(f.free); live > f.stats.maxGroups {
		f.stats.maxGroups = live
	}
	return g
}

// drop removes an empty group from its links.
func (f *fabric) drop(g int32) {
	gr := &f.groups[g]
	f.unlink(gr.out, gr.posOut)
	f.unlink(gr.in, gr.posIn)
	delete(f.index, pairKey(gr.out, gr.in))
	gr.live = false
	f.free = append(f.free, g)
}

func (f *fabric) unlink(l int32, pos int32) {
	a := f.adj[l]
	last := int32(len(a) - 1)
	if pos != last {
		moved := a[last]
		a[pos] = moved
		if mg := &f.groups[moved]; mg.out == l {
			mg.posOut = pos
		} else {
			mg.posIn = pos
		}
	}
	f.adj[l] = a[:last]
	if len(f.adj[l]) == 0 {
		f.sum[l] = 0
	}
}

func (h *service) push(m member) {
	h.mem = append(h.mem, m)
	i := len(h.mem) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !memberLess(h.mem[i], h.mem[p]) {
			break
		}
		h.mem[i], h.mem[p] = h.mem[p], h.mem[i]
		i = p
	}
	h.next = h.mem[0].key
}

func (h *service) pop() member {
	top := h.mem[0]
	n := len(h.mem) - 1
	h.mem[0] = h.mem[n]
	h.mem = h.mem[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && memberLess(h.mem[r], h.mem[l]) {
			c = r
		}
		if !memberLess(h.mem[c], h.mem[i]) {
			break
		}
		h.mem[i], h.mem[c] = h.mem[c], h.mem[i]
		i = c
	}
	if n > 0 {
		h.next = h.mem[0].key
	}
	return top
}

func memberLess(a, b member) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.msg < b.msg
}

// lheap is a min-heap of links by key, ties by link id; stale entries are
// skipped by the caller.
type lheap []lentry

type lentry struct {
	key float64
	l   int32
}

func (h lheap) less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return h[i].l < h[j].l
}

func (h *lheap) push(e lentry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// fix0 restores the heap after the top's key grew.
func (h *lheap) fix0() {
	s := *h
	n := len(s)
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
}

func (h *lheap) pop() lentry {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	h.fix0()
	return top
}

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
	f.predict()
	for growth := 0; ; growth++ {
		if growth == f.growths {
			f.closeRegion()
			f.stats.closures++
		}
		f.fill()
		if growth >= f.growths || !f.grow() {
			break
		}
		f.stats.expansionRun++
	}
	f.stats.regionLinks += int64(len(f.region))
	if len(f.region) > f.stats.maxRegion {
		f.stats.maxRegion = len(f.region)
	}
	// commit: every group on a region link is touched, so the region's
	// sums are rebuilt in the same walk
	for _, l := range f.region {
		f.level[l] = f.newLvl[l]
		f.sum[l] = 0
	}
	for _, g := range f.touched {
		gr := &f.groups[g]
		nr := f.nr[g]
		inOut, inIn := f.inRegion(gr.out), f.inRegion(gr.in)
		if math.Abs(nr-gr.rate) > commitTol*math.Max(nr, gr.rate) || f.nbIn[g] != gr.boundIn {
			d := float64(gr.m) * (nr - gr.rate)
			if !inOut {
				f.sum[gr.out] += d
			}
			if !inIn {
				f.sum[gr.in] += d
			}
			change(g, nr, f.nbIn[g])
			gr.rate, gr.boundIn = nr, f.nbIn[g]
			f.stats.rateChanges++
		}
		r := float64(gr.m) * gr.rate
		if inOut {
			f.sum[gr.out] += r
		}
		if inIn {
			f.sum[gr.in] += r
		}
	}
}

// predict adds the links a change of the region's levels reaches through
// the groups bound there: a group bound at a region link whose level moves
// moves its own rate, and with it the level of its other link where that
// link is saturated. Growing the region this way before the first fill
// saves the fills that would find those links one at a time; grow still
// finds what it misses (a group that changes bottleneck).
func (f *fabric) predict() {
	inf := math.Inf(1)
	for i := 0; i < len(f.region); i++ {
		l := f.region[i]
		for _, g := range f.adj[l] {
			gr := &f.groups[g]
			o := gr.in
			if o == l {
				o = gr.out
			}
			if (gr.in == l) == gr.boundIn && f.level[o] < inf {
				f.addRegion(o)
			}
		}
	}
}

// closeRegion grows the region to every link connected to it.
func (f *fabric) closeRegion() {
	for i := 0; i < len(f.region); i++ {
		l := f.region[i]
		for _, g := range f.adj[l] {
			gr := &f.groups[g]
			f.addRegion(gr.out)
			f.addRegion(gr.in)
		}
	}
}

// fill runs progressive filling over the region, flows that leave it capped
// at their outside link's level; it sets nr and nbIn for every touched group
// and newLvl for every region link.
func (f *fabric) fill() {
	f.gepoch++
	f.touched = f.touched[:0]
	f.caplist = f.caplist[:0]
	f.heap = f.heap[:0]
	inf := math.Inf(1)
	for _, l := range f.region {
		f.rem[l] = f.caps[l]
		f.cnt[l] = 0
		f.fixed[l] = false
		f.newLvl[l] = inf
	}
	for _, l := range f.region {
		for _, g := range f.adj[l] {
			if f.gstamp[g] == f.gepoch {
				continue
			}
			f.gstamp[g] = f.gepoch
			f.touched = append(f.touched, g)
			gr := &f.groups[g]
			f.nr[g] = -1
			m := float64(gr.m)
			inOut, inIn := f.inRegion(gr.out), f.inRegion(gr.in)
			if inOut {
				f.cnt[gr.out] += m
			}
			if inIn {
				f.cnt[gr.in] += m
			}
			if !inOut && f.level[gr.out] < inf {
				f.caplist = append(f.caplist, capEntry{f.level[gr.out], g, false})
			}
			if !inIn && f.level[gr.in] < inf {
				f.caplist = append(f.caplist, capEntry{f.level[gr.in], g, true})
			}
		}
	}
	f.caplist = f.caps2.sort(f.caplist)
	// The heap holds a lower bound of each link's fair level: freezing a
	// flow at a rate no higher than the link's level only raises the level
	// (rem-v*m)/(cnt-m), so a stale entry is refreshed when it reaches the
	// top instead of on every freeze.
	for _, l := range f.region {
		if f.cnt[l] > 0 {
			f.heap.push(lentry{f.rem[l] / f.cnt[l], l})
		}
	}
	level := 0.0
	ci := 0
	for {
		// the next link to saturate, with its true level
		for len(f.heap) > 0 {
			top := f.heap[0]
			l := top.l
			if f.fixed[l] || f.cnt[l] == 0 {
				f.heap.pop()
				continue
			}
			k := f.rem[l] / f.cnt[l]
			if k < level {
				k = level
			}
			if k > top.key {
				f.heap[0].key = k
				f.heap.fix0()
				continue
			}
			break
		}
		for ci < len(f.caplist) && f.nr[f.caplist[ci].g] >= 0 {
			ci++
		}
		// every touched group keeps an unfixed region link until it is
		// frozen: an empty heap leaves none to freeze
		if len(f.heap) == 0 {
			break
		}
		if ci < len(f.caplist) && f.caplist[ci].level <= f.heap[0].key {
			c := f.caplist[ci]
			ci++
			if c.level > level {
				level = c.level
			}
			f.freeze(c.g, c.level, c.in)
			continue
		}
		top := f.heap.pop()
		l := top.l
		if top.key > level {
			level = top.key
		}
		f.fixed[l] = true
		f.newLvl[l] = top.key
		for _, g := range f.adj[l] {
			if f.nr[g] < 0 {
				f.freeze(g, top.key, f.groups[g].in == l)
			}
		}
	}
}

// freeze fixes group g's rate at v, bound by its in link or its out link,
// and takes its flows off the unfrozen counts of its region links.
func (f *fabric) freeze(g int32, v float64, boundIn bool) {
	f.nr[g] = v
	f.nbIn[g] = boundIn
	gr := &f.groups[g]
	m := float64(gr.m)
	if l := gr.out; f.lstamp[l] == f.epoch && !f.fixed[l] {
		f.rem[l] -= v * m
		if f.cnt[l] -= m; f.cnt[l] < 0.5 {
			f.cnt[l] = 0
		}
	}
	if l := gr.in; f.lstamp[l] == f.epoch && !f.fixed[l] {
		f.rem[l] -= v * m
		if f.cnt[l] -= m; f.cnt[l] < 0.5 {
			f.cnt[l] = 0
		}
	}
}

// grow adds the outside links whose conditions the new rates break, and
// reports whether it added any: a saturated link whose flows' rates changed,
// or an unsaturated one the new rates push over its capacity.
func (f *fabric) grow() bool {
	inf := math.Inf(1)
	f.add = f.add[:0]
	f.unsat = f.unsat[:0]
	f.depoch++
	for _, g := range f.touched {
		gr := &f.groups[g]
		nr := f.nr[g]
		if math.Abs(nr-gr.rate) <= rateTol*math.Max(nr, gr.rate) {
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
