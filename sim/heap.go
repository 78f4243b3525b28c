package sim

// entry is a min-heap's entry: the heaps order by key, ties by tie (the
// engine's events by time then sequence, a group's members by service then
// message, a fill's links by level then link), and each entry carries its
// own val. The order reads the two fields directly, so that the sift loops
// compare inline rather than through a method of the type parameter.
type entry[V any] struct {
	key float64
	tie int64
	val V
}

func before[V any](a, b *entry[V]) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.tie < b.tie
}

// minHeap is a binary min-heap: h[0] comes before every other entry.
type minHeap[V any] []entry[V]

func (h *minHeap[V]) push(x entry[V]) {
	*h = append(*h, x)
	heapUp(*h, len(*h)-1)
}

func (h *minHeap[V]) pop() entry[V] {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	heapDown(s, 0)
	*h = s
	return top
}

// heapUp moves s[i] up until its parent comes before it.
func heapUp[V any](s []entry[V], i int) {
	x := s[i]
	for i > 0 {
		p := (i - 1) / 2
		if !before(&x, &s[p]) {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = x
}

// heapDown moves s[i] down until it comes before both its children.
func heapDown[V any](s []entry[V], i int) {
	n := len(s)
	if i >= n {
		return
	}
	x := s[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && before(&s[r], &s[l]) {
			c = r
		}
		if !before(&s[c], &x) {
			break
		}
		s[i] = s[c]
		i = c
	}
	s[i] = x
}
