package sim

import (
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/reshard"
)

// runOptions tune a simulation run.
type runOptions struct {
	// Bins is the number of time bins of the link-utilisation series
	// (the bin width doubles as the run grows); 0 means 128, a negative
	// number records no series.
	Bins int
	// TopLinks is how many links get a series line of their own beside the
	// per-class means (the busiest of each class and direction), the
	// critical path's binding link besides; 0 means 4.
	TopLinks int
}

// runProgram simulates the program on the cluster, its ranks placed by topo (the
// topology its schedules were built for), and returns what happened. It
// returns an error, naming the message, when a schedule's link class
// disagrees with the placement or the program cannot run (a rank waits
// forever), and never panics on user input.
//
// Every process runs the executor's loop: rounds in order; before round w
// it completes its posted rounds up to w-2 (two rounds in flight), unpacking
// what they received; then it copies the round's local copies and packs its
// strided sends (at the cluster's copy bandwidth), and posts all of the
// round's receives and sends at once. A message's flow starts when both of
// its ends have posted it, after the per-message latency of its class, and
// shares its sender's out link and its receiver's in link max-min fairly
// with the other flows there; a round completes when all its flows have.
func runProgram(p *simProgram, c Cluster, topo reshard.Topology, o runOptions) (*Result, error) {
	pl, err := placeRanks(c, topo, p.world)
	if err != nil {
		return nil, err
	}
	e, err := newEngine(p, c, pl, o)
	if err != nil {
		return nil, err
	}
	if err := e.run(); err != nil {
		return nil, err
	}
	return e.result(), nil
}

const (
	evStart = iota // a message's latency has passed: its flow joins the links
	evWake         // a process's compute is over
)

// event is an engine event: key its time, tie its sequence number.
type event = entry[evBody]

type evBody struct {
	id   int32
	ver  uint32
	kind uint8
}

// causes of a thread's time: a round-state index (>= 0), the program's
// start, or the end of a predecessor process (causeProc - index).
const causeStart = -1

func causeProc(p int32) int32 { return -2 - p }

// roundState is one posted (or copy-only) round of one process.
type roundState struct {
	left    int32   // operations not yet complete
	last    int32   // the message that completed it
	waited  int32   // the thread's cause when it posted
	postAt  float64 // when the thread posted it
	doneAt  float64
	compute float64 // seconds of copies and packing before the post
	unpack  float64 // seconds of unpacking after completion
	done    bool
	posted  bool
}

type procState struct {
	next     int32 // next round to start
	q        [2]int32
	qn       int8
	charged  bool // the next round's compute is charged to tt
	blocked  bool
	finished bool
	ready    bool
	tt       float64 // the thread is busy until then
	cause    int32
	finish   float64
	rsBase   int32
}

type engine struct {
	p    *simProgram
	c    Cluster
	pl   rankPlacement
	opts runOptions
	now  float64
	seq  uint64
	ev   minHeap[evBody]
	gh   gheap     // links by their bound groups' next completion (vtime.go)
	lh   [][]gitem // [link] its bound groups by virtual key
	// links whose first completion moved in this batch
	ldirty []int32
	lmark  []bool
	f      *fabric
	ser    *series

	// per message
	out, in  []int32 // links
	sendRS   []int32
	recvRS   []int32
	posted   []uint8
	lastSide []uint8 // 0: the sender posted last, 1: the receiver
	postAt   []float64
	mEnd     []float64
	boundIn  []bool
	// per round and process
	rs    []roundState
	ps    []procState
	succ  [][]int32
	ready []int32
	rhead int
	seeds []int32
	sstmp []uint32
	sep   uint32
	// per tensor
	tensorEnd   []float64
	tensorBytes []int64

	nicFirst, nicLast []int

	// the network model beyond bandwidth and latency (docs/sim.md)
	relayed  []bool              // [msg] relayed across rails (nil on a fat tree)
	nRelayed int64               // messages relayed
	tat      []float64           // [link] the message-rate bucket's theoretical arrival time (nil: no limit)
	rateWait map[int32]rateDelay // messages the message rate delayed
	msgCount []int32             // [link] network messages through each NIC link

	flowEvents int64
	batches    int64
	wakes      int64
}

func newEngine(p *simProgram, c Cluster, pl rankPlacement, o runOptions) (*engine, error) {
	world := p.world
	nLinks := 2*world + 2*pl.Nics
	caps := make([]float64, nLinks)
	for r := 0; r < world; r++ {
		caps[2*r], caps[2*r+1] = c.LocalBW, c.LocalBW
	}
	for n := 0; n < pl.Nics; n++ {
		caps[2*world+2*n], caps[2*world+2*n+1] = c.NetBW, c.NetBW
	}
	nm := len(p.msgs)
	e := &engine{p: p, c: c, pl: pl, opts: o, f: newFabric(caps),
		out: make([]int32, nm), in: make([]int32, nm), sendRS: make([]int32, nm), recvRS: make([]int32, nm),
		posted: make([]uint8, nm), lastSide: make([]uint8, nm), postAt: make([]float64, nm), mEnd: make([]float64, nm),
		boundIn: make([]bool, nm), tensorEnd: make([]float64, len(p.tensor)), tensorBytes: make([]int64, len(p.tensor)),
		sstmp: make([]uint32, nLinks), msgCount: make([]int32, nLinks), lh: make([][]gitem, nLinks), lmark: make([]bool, nLinks)}
	if c.MsgRate > 0 {
		e.tat, e.rateWait = make([]float64, nLinks), map[int32]rateDelay{}
	}
	for i := range p.msgs {
		m := &p.msgs[i]
		var cls reshard.LinkClass
		switch {
		case m.Src == m.Dst:
			cls = reshard.LinkSelf
		case pl.Domain[m.Src] == pl.Domain[m.Dst]:
			cls = reshard.LinkLocal
		default:
			cls = reshard.LinkNetwork
		}
		if cls != m.Class {
			part := p.parts[m.Part]
			return nil, fmt.Errorf("sim: message %d of %s (rank %d to %d) was scheduled as %s but the placement makes it %s: build the schedule with the topology the simulation uses",
				i-part.First, part.Name, m.Src, m.Dst, m.Class, cls)
		}
		switch cls {
		case reshard.LinkLocal:
			e.out[i], e.in[i] = int32(2*m.Src), int32(2*m.Dst+1)
		case reshard.LinkNetwork:
			src := pl.Nic[m.Src]
			if c.rail() {
				if r := pl.relayNic(c, src, pl.Nic[m.Dst]); r != src {
					if e.relayed == nil {
						e.relayed = make([]bool, nm)
					}
					e.relayed[i] = true
					e.nRelayed++
					src = r
				}
			}
			e.out[i], e.in[i] = int32(2*world+2*src), int32(2*world+2*pl.Nic[m.Dst]+1)
			e.msgCount[e.out[i]]++
			e.msgCount[e.in[i]]++
		default:
			e.out[i], e.in[i] = -1, -1
		}
		var ok bool
		if e.tensorBytes[m.Tensor], ok = checked.Add(e.tensorBytes[m.Tensor], m.Bytes); !ok {
			return nil, fmt.Errorf("sim: tensor %s moves more than int64 bytes", p.tensor[m.Tensor])
		}
	}
	copySecs := func(b int64) float64 {
		if c.CopyBW <= 0 {
			return 0
		}
		return float64(b) / c.CopyBW
	}
	e.ps = make([]procState, len(p.procs))
	e.succ = make([][]int32, len(p.procs))
	nrs := 0
	for i := range p.procs {
		nrs += len(p.procs[i].rounds)
	}
	if nrs > math.MaxInt32 {
		return nil, fmt.Errorf("sim: %d rounds exceed the simulator's limit", nrs)
	}
	e.rs = make([]roundState, nrs)
	k := int32(0)
	for i := range p.procs {
		pr := &p.procs[i]
		e.ps[i] = procState{rsBase: k, cause: causeStart}
		if pr.After >= 0 {
			e.succ[pr.After] = append(e.succ[pr.After], int32(i))
		}
		for _, rd := range pr.rounds {
			copies, recvs, sends := p.RoundMessages(rd)
			var pre, post int64
			for _, mi := range copies {
				pre += p.msgs[mi].Bytes
			}
			for _, mi := range sends {
				if p.msgs[mi].Pack {
					pre += p.msgs[mi].Bytes
				}
				e.sendRS[mi] = k
			}
			for _, mi := range recvs {
				if p.msgs[mi].Unpack {
					post += p.msgs[mi].Bytes
				}
				e.recvRS[mi] = k
			}
			e.rs[k] = roundState{compute: copySecs(pre), unpack: copySecs(post), last: -1, waited: causeStart}
			k++
		}
	}
	if o.Bins >= 0 {
		bins := o.Bins
		if bins == 0 {
			bins = 128
		}
		e.ser = newSeries(nLinks, bins)
		e.f.ser = e.ser
	}
	return e, nil
}

func (e *engine) epsT() float64 { return 1e-12 * (1 + e.now) }

func (e *engine) push(t float64, kind uint8, id int32, ver uint32) {
	e.seq++
	e.ev.push(event{key: t, tie: int64(e.seq), val: evBody{id: id, ver: ver, kind: kind}})
}

func (e *engine) seed(l int32) {
	if e.sstmp[l] != e.sep {
		e.sstmp[l] = e.sep
		e.seeds = append(e.seeds, l)
	}
}

func (e *engine) run() error {
	e.sep = 1
	for i := range e.p.procs {
		if e.p.procs[i].After < 0 {
			e.makeReady(int32(i))
		}
	}
	for {
		e.drainReady()
		e.settle()
		_, tg, okg := e.gh.top()
		if len(e.ev) == 0 && !okg {
			break
		}
		t0 := tg
		if len(e.ev) > 0 && (!okg || e.ev[0].key < tg) {
			t0 = e.ev[0].key
		}
		e.now = math.Max(e.now, t0)
		e.f.now = e.now
		e.batches++
		lim := t0 + e.epsT()
		for {
			l, tg, okg := e.gh.top()
			if okg && tg <= lim && (len(e.ev) == 0 || tg <= e.ev[0].key) {
				if !e.completeDue(e.lh[l][0].g) {
					// nothing was due after all: the link waits for the
					// batch's solve
					e.gh.remove(l)
					e.markLink(l)
				}
				continue
			}
			if len(e.ev) == 0 || e.ev[0].key > lim {
				break
			}
			ev := e.ev.pop()
			switch ev.val.kind {
			case evStart:
				e.begin(ev.val.id)
			case evWake:
				e.wakes++
				e.makeReady(ev.val.id)
			}
		}
	}
	for l := range e.f.lt {
		e.f.flush(int32(l))
	}
	for i := range e.ps {
		if !e.ps[i].finished {
			pr := &e.p.procs[i]
			part := e.p.parts[pr.Part]
			st := &e.ps[i]
			round := int32(-1)
			if int(st.next) < len(pr.rounds) {
				round = pr.rounds[st.next].Round
			}
			if st.qn > 0 {
				round = e.roundOf(st.q[0])
			}
			return fmt.Errorf("sim: rank %d of %s never finished: it waits in round %d for messages no rank sends (the program is inconsistent)",
				pr.Rank, part.Name, round)
		}
	}
	return nil
}

// roundOf returns the schedule round of a round state.
func (e *engine) roundOf(k int32) int32 { return e.roundOf2(e.procOf(k), k) }

func (e *engine) makeReady(pi int32) {
	st := &e.ps[pi]
	if !st.ready && !st.finished {
		st.ready = true
		e.ready = append(e.ready, pi)
	}
}

func (e *engine) drainReady() {
	for e.rhead < len(e.ready) {
		pi := e.ready[e.rhead]
		e.rhead++
		e.ps[pi].ready = false
		e.step(pi)
	}
	e.ready, e.rhead = e.ready[:0], 0
}

// settle recomputes the rates after the batch and schedules the next
// completion of every group whose rate or members changed.
func (e *engine) settle() {
	if len(e.seeds) > 0 {
		e.f.solve(e.seeds, func(g int32, rate float64, boundIn bool) {
			// a group moves when its bound side changes, or when it has
			// none yet (rate 0: it never had a solve)
			if gr := &e.f.groups[g]; boundIn != gr.boundIn || gr.rate == 0 {
				b := gr.out
				if boundIn {
					b = gr.in
				}
				e.rebind(g, b)
			}
		})
		e.seeds = e.seeds[:0]
		e.sep++
		for _, l := range e.f.region {
			e.markLink(l)
		}
	}
	for _, l := range e.ldirty {
		e.lmark[l] = false
		e.relink(l)
	}
	e.ldirty = e.ldirty[:0]
}

// begin starts a message's flow (its latency has passed).
func (e *engine) begin(mi int32) {
	e.flowEvents++
	m := &e.p.msgs[mi]
	if m.Bytes == 0 {
		e.finishMsg(mi)
		return
	}
	g := e.f.groupFor(e.out[mi], e.in[mi], e.now)
	e.advance(g)
	gr, sv := &e.f.groups[g], &e.f.serv[g]
	e.f.push(g, member{key: sv.served + float64(m.Bytes), tie: int64(mi), val: sv.servedOut})
	gr.m++
	e.seed(gr.out)
	e.seed(gr.in)
	if b := e.f.gpos[g].bind; b >= 0 {
		e.lhSet(b, g, e.vkey(g))
		e.markLink(b)
	}
}

// completeDue completes the members of a group whose service is reached,
// and reports whether any was.
func (e *engine) completeDue(g int32) bool {
	e.advance(g)
	gr, sv := &e.f.groups[g], &e.f.serv[g]
	m0 := gr.m
	for gr.m > 0 {
		top := e.f.mem[g][0]
		tol := 1e-9*math.Max(top.key, 1) + gr.rate*2*e.epsT()
		if top.key > sv.served+tol {
			break
		}
		e.f.pop(g)
		gr.m--
		bytes := float64(e.p.msgs[top.tie].Bytes)
		mi := int32(top.tie)
		e.boundIn[mi] = sv.servedOut-top.val < bytes/2
		e.finishMsg(mi)
		gr, sv = &e.f.groups[g], &e.f.serv[g]
	}
	done := gr.m < m0
	e.seed(gr.out)
	e.seed(gr.in)
	b := e.f.gpos[g].bind
	if gr.m == 0 {
		e.lhRemove(b, g)
		e.f.gpos[g].bind = -1
		e.f.drop(g)
	} else {
		e.lhSet(b, g, e.vkey(g))
	}
	e.relink(b)
	return done
}

// finishMsg records a completed message and completes the rounds on both
// of its sides.
func (e *engine) finishMsg(mi int32) {
	e.flowEvents++
	m := &e.p.msgs[mi]
	e.mEnd[mi] = e.now
	e.tensorEnd[m.Tensor] = math.Max(e.tensorEnd[m.Tensor], e.now)
	for _, k := range [2]int32{e.sendRS[mi], e.recvRS[mi]} {
		r := &e.rs[k]
		r.left--
		if r.left == 0 {
			r.done, r.doneAt, r.last = true, e.now, mi
			// the process may be waiting for it
			pi := e.procOf(k)
			if e.ps[pi].blocked && e.ps[pi].qn > 0 && e.ps[pi].q[0] == k {
				e.ps[pi].blocked = false
				e.makeReady(pi)
			}
		}
	}
}

// procOf returns the process a round state belongs to (round states are
// laid out by process).
func (e *engine) procOf(k int32) int32 {
	lo, hi := 0, len(e.ps)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if e.ps[mid].rsBase <= k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return int32(lo)
}
