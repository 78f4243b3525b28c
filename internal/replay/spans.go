package replay

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// extent returns one past the last byte a descriptor touches (0 when it
// describes none).
func extent(at strided.Desc) int64 {
	if at.Bytes() == 0 {
		return 0
	}
	end := at.Offset + at.Run
	for i, c := range at.Count {
		end += (c - 1) * at.Stride[i]
	}
	return end
}

// ival is a half-open address interval.
type ival struct{ lo, hi uint64 }

// spans is a set of addresses, kept as sorted disjoint intervals.
type spans []ival

func (s spans) overlaps(q ival) bool {
	i, _ := slices.BinarySearchFunc(s, q.lo, func(v ival, lo uint64) int {
		if v.hi <= lo {
			return -1
		}
		return 1
	})
	return i < len(s) && s[i].lo < q.hi
}

func (s *spans) insert(q ival) {
	if q.lo >= q.hi {
		return
	}
	v := *s
	i, _ := slices.BinarySearchFunc(v, q.lo, func(x ival, lo uint64) int {
		if x.hi < lo {
			return -1
		}
		return 1
	})
	j := i
	for j < len(v) && v[j].lo <= q.hi {
		q.lo, q.hi = min(q.lo, v[j].lo), max(q.hi, v[j].hi)
		j++
	}
	*s = slices.Replace(v, i, j, q)
}

func span(base uint64, at strided.Desc) ival {
	if at.Bytes() == 0 {
		return ival{}
	}
	return ival{base + uint64(at.Offset), base + uint64(extent(at))}
}

// roundSpansOf are the bytes of one round: what its copies read and write,
// what its sends read (directly or through packs) and what its receives
// write (directly or through unpacks).
type roundSpansOf struct {
	copyRd, copyWr, sendRd, recvWr spans
}

// roundSpans returns round i's spans.
func (bd *builder) roundSpans(i int) (roundSpansOf, error) {
	s := &bd.p.Rounds[i]
	var sp roundSpansOf
	for _, cp := range s.Copies {
		for _, side := range []struct {
			regions []program.Region
			into    *spans
		}{{cp.From, &sp.copyRd}, {cp.To, &sp.copyWr}} {
			for _, r := range side.regions {
				a, err := bd.region(s.Index, "local copy", r)
				if err != nil {
					return sp, err
				}
				side.into.insert(span(a, r.At))
			}
		}
	}
	for dir, list := range [][]program.Wire{s.Sends, s.Recvs} {
		into := &sp.sendRd
		if dir == 1 {
			into = &sp.recvWr
		}
		for wi := range list {
			w := &list[wi]
			regions := []program.Region{w.Region}
			if w.Mode == program.WireStaged {
				regions = regions[:0]
				for _, pt := range w.Parts {
					regions = append(regions, pt.Regions...)
				}
			}
			for _, r := range regions {
				a, err := bd.region(s.Index, fmt.Sprintf("operation with rank %d", w.Peer), r)
				if err != nil {
					return sp, err
				}
				into.insert(span(a, r.At))
			}
		}
	}
	return sp, nil
}
