package sim

// before is the order of a min-heap's entries: a.before(b) when a comes
// out first. The engine's events, a group's members and the fabric's links
// are each kept in a binary min-heap under their own before; heapUp and
// heapDown are the two moves all three use.
type before[T any] interface{ before(T) bool }

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
