package sim

import (
	"math"
	"math/bits"
	"slices"
)

// capSorter orders a fill's caps by level. A fill's caps take few distinct
// levels, the levels of the saturated links outside its region (in
// DeepSeek-V3 128+128 with hier's receive share, 27 among 270 caps a fill
// on average), so it sorts the distinct levels and places each cap in its
// level's bucket, in the order fill listed them: caps of one level freeze
// at that level in any order, and this one is deterministic.
type capSorter struct {
	slot  []int32  // open-addressing table: a level's bucket
	stamp []uint32 // [slot] the call that filled it
	epoch uint32
	shift uint
	lv    []float64 // [bucket] level
	off   []int32   // [bucket] caps, then the bucket's next place
	order []int32   // buckets by level
	bk    []int32   // [cap] bucket
	out   []capEntry
}

// sort returns c's caps in order, in a buffer of its own; c's buffer is
// kept for the next call.
func (s *capSorter) sort(c []capEntry) []capEntry {
	if len(c) <= 24 {
		insertionCaps(c)
		return c
	}
	s.table(2 * len(c))
	s.epoch++
	s.lv, s.off, s.bk = s.lv[:0], s.off[:0], s.bk[:0]
	for _, x := range c {
		s.bk = append(s.bk, s.bucket(x.level))
	}
	s.order = s.order[:0]
	for b := range s.lv {
		s.order = append(s.order, int32(b))
	}
	slices.SortFunc(s.order, func(a, b int32) int {
		switch {
		case s.lv[a] < s.lv[b]:
			return -1
		case s.lv[a] > s.lv[b]:
			return 1
		}
		return 0
	})
	var at int32
	for _, b := range s.order {
		n := s.off[b]
		s.off[b] = at
		at += n
	}
	out := slices.Grow(s.out[:0], len(c))[:len(c)]
	for i, x := range c {
		b := s.bk[i]
		out[s.off[b]] = x
		s.off[b]++
	}
	s.out = c
	return out
}

// table makes the hash table at least n slots (a power of two).
func (s *capSorter) table(n int) {
	if len(s.slot) >= n {
		return
	}
	size := 64
	for size < n {
		size *= 2
	}
	s.slot, s.stamp, s.epoch = make([]int32, size), make([]uint32, size), 0
	s.shift = uint(64 - bits.TrailingZeros(uint(size)))
}

// bucket returns the bucket of level v, making one if needed.
func (s *capSorter) bucket(v float64) int32 {
	k := math.Float64bits(v)
	mask := uint64(len(s.slot) - 1)
	for i := (k * 0x9E3779B97F4A7C15) >> s.shift; ; i = (i + 1) & mask {
		if s.stamp[i] != s.epoch {
			s.stamp[i] = s.epoch
			b := int32(len(s.lv))
			s.slot[i] = b
			s.lv = append(s.lv, v)
			s.off = append(s.off, 1)
			return b
		}
		if b := s.slot[i]; s.lv[b] == v {
			s.off[b]++
			return b
		}
	}
}

// insertionCaps orders a short list of caps by level, then group.
func insertionCaps(c []capEntry) {
	for i := 1; i < len(c); i++ {
		x := c[i]
		j := i
		for j > 0 && capLess(x, c[j-1]) {
			c[j] = c[j-1]
			j--
		}
		c[j] = x
	}
}

func capLess(a, b capEntry) bool { return a.level < b.level || (a.level == b.level && a.g < b.g) }
