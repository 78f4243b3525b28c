package sim

import "math"

// Virtual time: the groups bound at one link all move at that link's level
// (solve freezes them there), so each link keeps its virtual service vt,
// the service one of its bound groups' members has received since the run
// began, and a group keeps its service as an anchor (served at the link's
// vt = v0). A level change then costs one update of the link, not one per
// group: the engine's heap holds links by their next completion, each link
// a heap of its bound groups by virtual key (the vt at which the group's
// next member completes); only a group whose bound link changes moves.

// tick brings link l's virtual service up to now at its current level;
// it comes before every change of the level.
func (f *fabric) tick(l int32) {
	if dt := f.now - f.vtT[l]; dt > 0 && f.level[l] < math.Inf(1) {
		f.vt[l] += f.level[l] * dt
	}
	f.vtT[l] = f.now
}

// vtNow is link l's virtual service now.
func (f *fabric) vtNow(l int32) float64 {
	if dt := f.now - f.vtT[l]; dt > 0 {
		return f.vt[l] + f.level[l]*dt
	}
	return f.vt[l]
}

// advance brings a group's service up to now on its bound link.
func (e *engine) advance(g int32) {
	b := e.f.gpos[g].bind
	if b < 0 {
		return
	}
	sv := &e.f.serv[g]
	v := e.f.vtNow(b)
	if d := v - sv.v0; d > 0 {
		sv.served += d
		if b == e.f.groups[g].out {
			sv.servedOut += d
		}
	}
	sv.v0 = v
}

// vkey is group g's next completion in its bound link's virtual service.
func (e *engine) vkey(g int32) float64 {
	sv := &e.f.serv[g]
	return sv.v0 + math.Max(sv.next-sv.served, 0)
}

// rebind moves group g to link b (its new bottleneck), its service brought
// up to now on the old one.
func (e *engine) rebind(g, b int32) {
	e.advance(g)
	gp := &e.f.gpos[g]
	if gp.bind >= 0 {
		e.lhRemove(gp.bind, g)
		e.markLink(gp.bind)
	}
	gp.bind = b
	e.f.serv[g].v0 = e.f.vtNow(b)
	e.lhSet(b, g, e.vkey(g))
	e.markLink(b)
}

// markLink lists link l for relink at the end of the batch.
func (e *engine) markLink(l int32) {
	if !e.lmark[l] {
		e.lmark[l] = true
		e.ldirty = append(e.ldirty, l)
	}
}

// relink places link l in the engine's heap at its first group's
// completion, or takes it out when no group is bound there.
func (e *engine) relink(l int32) {
	h := e.lh[l]
	if len(h) == 0 {
		e.gh.remove(l)
		return
	}
	f := e.f
	e.gh.set(l, f.vtT[l]+math.Max(h[0].at-f.vt[l], 0)/f.level[l], h[0].g)
}

// lhSet places group g in link l's heap at virtual key k.
func (e *engine) lhSet(l, g int32, k float64) {
	h := e.lh[l]
	gp := &e.f.gpos[g]
	if gp.lpos < 0 {
		gp.lpos = int32(len(h))
		h = append(h, gitem{k, g, g})
		e.lh[l] = h
		e.lhUp(l, int(gp.lpos))
		return
	}
	i := int(gp.lpos)
	old := h[i]
	h[i].at = k
	if h[i].less(old) {
		e.lhUp(l, i)
	} else {
		e.lhDown(l, i)
	}
}

// lhRemove takes group g out of link l's heap.
func (e *engine) lhRemove(l, g int32) {
	gp := &e.f.gpos[g]
	i := int(gp.lpos)
	gp.lpos = -1
	h := e.lh[l]
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		e.f.gpos[h[i].g].lpos = int32(i)
	}
	e.lh[l] = h[:last]
	if i != last {
		e.lhDown(l, i)
		e.lhUp(l, i)
	}
}

// lhPut puts x at h[i] and records the place in its group.
func (e *engine) lhPut(h []gitem, i int, x gitem) {
	h[i] = x
	e.f.gpos[x.g].lpos = int32(i)
}

func (e *engine) lhUp(l int32, i int) {
	h := e.lh[l]
	x := h[i]
	for ; i > 0 && x.less(h[(i-1)/2]); i = (i - 1) / 2 {
		e.lhPut(h, i, h[(i-1)/2])
	}
	e.lhPut(h, i, x)
}

func (e *engine) lhDown(l int32, i int) {
	h := e.lh[l]
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].less(h[c]) {
			c = r
		}
		if !h[c].less(x) {
			break
		}
		e.lhPut(h, i, h[c])
		i = c
	}
	e.lhPut(h, i, x)
}
