package sim

// gheap is an indexed min-heap of groups by their next completion time
// (ties by group id): one entry per group, moved in place when the time
// changes, so rate changes leave no stale entries behind. Each entry holds
// its time, so that a comparison reads the heap alone.
type gheap struct {
	items []gitem
	pos   []int32 // [group] index in items, -1 when absent
}

type gitem struct {
	at float64 // completion time
	g  int32
}

func (a gitem) less(b gitem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.g < b.g
}

func (h *gheap) up(i int) {
	x := h.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if !x.less(h.items[p]) {
			break
		}
		h.items[i] = h.items[p]
		h.pos[h.items[i].g] = int32(i)
		i = p
	}
	h.items[i] = x
	h.pos[x.g] = int32(i)
}

func (h *gheap) down(i int) {
	n := len(h.items)
	x := h.items[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.items[r].less(h.items[l]) {
			c = r
		}
		if !h.items[c].less(x) {
			break
		}
		h.items[i] = h.items[c]
		h.pos[h.items[i].g] = int32(i)
		i = c
	}
	h.items[i] = x
	h.pos[x.g] = int32(i)
}

// set places group g at time t.
func (h *gheap) set(g int32, t float64) {
	for int(g) >= len(h.pos) {
		h.pos = append(h.pos, -1)
	}
	if i := h.pos[g]; i >= 0 {
		old := h.items[i].at
		h.items[i].at = t
		if t < old {
			h.up(int(i))
		} else {
			h.down(int(i))
		}
		return
	}
	h.pos[g] = int32(len(h.items))
	h.items = append(h.items, gitem{t, g})
	h.up(len(h.items) - 1)
}

// remove takes group g out, if present.
func (h *gheap) remove(g int32) {
	if int(g) >= len(h.pos) || h.pos[g] < 0 {
		return
	}
	i := int(h.pos[g])
	last := len(h.items) - 1
	h.pos[g] = -1
	if i != last {
		h.items[i] = h.items[last]
		h.pos[h.items[i].g] = int32(i)
	}
	h.items = h.items[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// top returns the earliest group and its time; ok is false when empty.
func (h *gheap) top() (int32, float64, bool) {
	if len(h.items) == 0 {
		return 0, 0, false
	}
	return h.items[0].g, h.items[0].at, true
}
