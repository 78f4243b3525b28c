package sim

// gheap is an indexed min-heap by time, ties by a tie value then id: one
// entry per id, moved in place when the time changes, so that changes leave
// no stale entries behind. The engine keeps links in one by their first
// bound group's completion (ties by that group), and each link's groups in
// one of its own by virtual key (vtime.go). Each entry holds its time, so
// that a comparison reads the heap alone.
type gheap struct {
	items []gitem
	pos   []int32 // [id] index in items, -1 when absent
}

type gitem struct {
	at  float64 // completion time
	tie int32   // ties first by tie, then by g
	g   int32
}

func (a gitem) less(b gitem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.tie != b.tie {
		return a.tie < b.tie
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

// set places entry g at time t, ties by tie.
func (h *gheap) set(g int32, t float64, tie int32) {
	for int(g) >= len(h.pos) {
		h.pos = append(h.pos, -1)
	}
	if i := h.pos[g]; i >= 0 {
		old := h.items[i]
		h.items[i].at, h.items[i].tie = t, tie
		if h.items[i].less(old) {
			h.up(int(i))
		} else {
			h.down(int(i))
		}
		return
	}
	h.pos[g] = int32(len(h.items))
	h.items = append(h.items, gitem{t, tie, g})
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
