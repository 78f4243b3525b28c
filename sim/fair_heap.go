package sim

// gheap is an indexed min-heap of groups by their next completion time
// (ties by group id): one entry per group, moved in place when the time
// changes, so rate changes leave no stale entries behind.
type gheap struct {
	items []int32   // group ids
	pos   []int32   // [group] index in items, -1 when absent
	at    []float64 // [group] completion time
}

func (h *gheap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.at[a] != h.at[b] {
		return h.at[a] < h.at[b]
	}
	return a < b
}

func (h *gheap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]] = int32(i)
	h.pos[h.items[j]] = int32(j)
}

func (h *gheap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *gheap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// set places group g at time t.
func (h *gheap) set(g int32, t float64) {
	for int(g) >= len(h.pos) {
		h.pos = append(h.pos, -1)
		h.at = append(h.at, 0)
	}
	if i := h.pos[g]; i >= 0 {
		old := h.at[g]
		h.at[g] = t
		if t < old {
			h.up(int(i))
		} else {
			h.down(int(i))
		}
		return
	}
	h.at[g] = t
	h.pos[g] = int32(len(h.items))
	h.items = append(h.items, g)
	h.up(len(h.items) - 1)
}

// remove takes group g out, if present.
func (h *gheap) remove(g int32) {
	if int(g) >= len(h.pos) || h.pos[g] < 0 {
		return
	}
	i := int(h.pos[g])
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	h.pos[g] = -1
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
	g := h.items[0]
	return g, h.at[g], true
}
