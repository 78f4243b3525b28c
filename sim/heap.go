package sim

// before is the order of a min-heap's entries: a.before(b) when a comes
// out first. The engine's events, a group's members and the fabric's links
// are each kept in a minHeap under their own before.
type before[T any] interface{ before(T) bool }

// minHeap is a binary min-heap: h[0] comes before every other entry.
type minHeap[T before[T]] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
	heapUp(*h, len(*h)-1)
}

func (h *minHeap[T]) pop() T {
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
func heapUp[T before[T]](s []T, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// heapDown moves s[i] down until it comes before both its children.
func heapDown[T before[T]](s []T, i int) {
	n := len(s)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s[r].before(s[l]) {
			c = r
		}
		if !s[c].before(s[i]) {
			return
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
}

// keyThenTie orders by key, ties by id: the order of all three heaps
// (events by time then sequence, members by key then message, links by key
// then link).
func keyThenTie[I int32 | uint64](ka, kb float64, ia, ib I) bool {
	if ka != kb {
		return ka < kb
	}
	return ia < ib
}
