package sim

import (
	"math"

	"github.com/m2n-dev/m2n/reshard"
)

func (e *engine) latency(cls reshard.LinkClass) float64 {
	if cls == reshard.LinkNetwork {
		return e.c.NetLatency
	}
	return e.c.LocalLatency
}

// msgLatency is message mi's per-message latency: its class's, and for a
// message relayed across rails the NVLink hop's besides.
func (e *engine) msgLatency(mi int32) float64 {
	lat := e.latency(e.p.msgs[mi].Class)
	if e.relayed != nil && e.relayed[mi] {
		lat += e.c.LocalLatency
	}
	return lat
}

// rateDelay is how long the NIC message rate held a message back after
// its latency, and the NIC link whose bucket did.
type rateDelay struct {
	wait float64
	link int32
}

// rateStart is when a network message whose latency ends at t may start
// under the NIC message rate: a token bucket per NIC link (GCRA: a
// theoretical arrival time per link, a message conforming up to burst-1
// intervals early). Both of its NIC links take the message at the start.
// Without a limit, or when neither bucket is empty, it is t itself.
func (e *engine) rateStart(mi int32, t float64) float64 {
	if e.tat == nil || e.p.msgs[mi].Class != reshard.LinkNetwork {
		return t
	}
	T := 1 / e.c.MsgRate
	tau := float64(max(e.c.MsgBurst, 1)-1) * T
	o, i := e.out[mi], e.in[mi]
	s := t
	by := int32(-1)
	if x := e.tat[o] - tau; x > s {
		s, by = x, o
	}
	if x := e.tat[i] - tau; x > s {
		s, by = x, i
	}
	e.tat[o] = math.Max(e.tat[o], s) + T
	e.tat[i] = math.Max(e.tat[i], s) + T
	if by >= 0 {
		e.rateWait[mi] = rateDelay{wait: s - t, link: by}
	}
	return s
}

// post records one side's post of a message; the second post starts it.
func (e *engine) post(mi int32, side uint8) {
	if e.posted[mi] == 0 {
		e.posted[mi], e.lastSide[mi], e.postAt[mi] = 1, side, e.now
		return
	}
	e.posted[mi], e.lastSide[mi], e.postAt[mi] = 2, side, e.now
	lat := e.msgLatency(mi)
	if t := e.rateStart(mi, e.now+lat); lat > 0 || t > e.now {
		e.push(t, evStart, mi, 0)
		return
	}
	e.begin(mi)
}

// step runs a process until it must wait for a round or for its own compute.
func (e *engine) step(pi int32) {
	st := &e.ps[pi]
	pr := &e.p.procs[pi]
	if st.finished {
		return
	}
	if st.tt < e.now {
		st.tt = e.now
	}
	eps := e.epsT()
	for {
		last := int(st.next) == len(pr.rounds)
		if st.qn > 0 && (last || e.roundOf2(pi, st.q[0]) <= pr.rounds[st.next].Round-2) {
			k := st.q[0]
			r := &e.rs[k]
			if !r.done {
				st.blocked = true
				return
			}
			if r.doneAt >= st.tt {
				st.tt, st.cause = r.doneAt, k
			}
			st.tt += r.unpack
			st.q[0], st.q[1] = st.q[1], -1
			st.qn--
			continue
		}
		if last {
			if st.tt > e.now+eps {
				e.push(st.tt, evWake, pi, 0)
				return
			}
			st.finished, st.finish = true, st.tt
			for _, s := range e.succ[pi] {
				ss := &e.ps[s]
				ss.tt, ss.cause = st.tt, causeProc(pi)
				e.makeReady(s)
			}
			return
		}
		k := st.rsBase + st.next
		r := &e.rs[k]
		if !st.charged {
			st.charged = true
			r.waited = st.cause
			st.tt += r.compute
		}
		if st.tt > e.now+eps {
			e.push(st.tt, evWake, pi, 0)
			return
		}
		st.charged = false
		rd := pr.rounds[st.next]
		st.next++
		copies, recvs, sends := e.p.RoundMessages(rd)
		r.posted, r.postAt = true, e.now
		for _, mi := range copies {
			e.mEnd[mi] = e.now
			t := e.p.msgs[mi].Tensor
			e.tensorEnd[t] = math.Max(e.tensorEnd[t], e.now)
		}
		n := len(recvs) + len(sends)
		if n == 0 {
			r.done, r.doneAt = true, e.now
			if len(copies) > 0 {
				r.last = copies[len(copies)-1]
			}
			continue
		}
		r.left = int32(n)
		st.q[st.qn] = k
		st.qn++
		for _, mi := range recvs {
			e.post(mi, 1)
		}
		for _, mi := range sends {
			e.post(mi, 0)
		}
		// posting may have completed zero-byte messages of this process
		// already; the loop sees them as done.
		st = &e.ps[pi]
	}
}

func (e *engine) roundOf2(pi int32, k int32) int32 {
	return e.p.procs[pi].rounds[k-e.ps[pi].rsBase].Round
}
