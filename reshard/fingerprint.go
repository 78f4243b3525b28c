package reshard

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// planVersion changes whenever the planner's output for the same inputs
// changes, so that ranks running different m2n builds never agree by accident.
const planVersion = 1

// fingerprint hashes everything a plan is derived from with 64-bit FNV-1a
// over a fixed binary encoding.
func fingerprint(src, dst placement.Layout, world int, opts Options) uint64 {
	h := fnv.New64a()
	var b []byte
	put := func(v int64) { b = binary.LittleEndian.AppendUint64(b, uint64(v)) }
	put(planVersion)
	put(int64(world))
	for _, l := range []placement.Layout{src, dst} {
		b = append(b, encodeLayout(l)...)
	}
	if opts.StripeReplicas {
		put(1)
	} else {
		put(0)
	}
	h.Write(b)
	return h.Sum64()
}

// encodeLayout is a canonical byte encoding of a layout.
func encodeLayout(l placement.Layout) []byte {
	var b []byte
	put := func(v int64) { b = binary.LittleEndian.AppendUint64(b, uint64(v)) }
	shape := l.Shape()
	put(int64(len(shape)))
	for _, s := range shape {
		put(s)
	}
	put(int64(l.DType()))
	m := l.Mesh()
	put(int64(m.NDim()))
	for a := 0; a < m.NDim(); a++ {
		put(int64(m.Dim(a)))
	}
	for i := 0; i < m.Size(); i++ {
		put(int64(m.RankAt(i)))
	}
	for _, p := range l.Placements() {
		kind := int64(0) // Replicate
		if p.IsShard() {
			kind = 1
		}
		put(kind)
		put(int64(p.Dim()))
	}
	return b
}

// scheduleVersion changes whenever the encoding below or the meaning of a
// schedule's fields changes.
const scheduleVersion = 1

// ScheduleFingerprint hashes a schedule as built (route, world, round
// budget, every message: ranks, round, bytes, link class, tensor, box and
// the regions on both sides), the plans it was built from, the topology
// and the coalescing threshold: ranks whose fingerprints are equal run the
// same wire protocol.
func ScheduleFingerprint(s *Schedule, topo Topology, coalesce int64) uint64 {
	h := fnv.New64a()
	var b []byte
	put := func(v int64) { b = binary.LittleEndian.AppendUint64(b, uint64(v)) }
	flush := func() {
		h.Write(b)
		b = b[:0]
	}
	put(scheduleVersion)
	put(int64(len(s.Route)))
	b = append(b, s.Route...)
	put(int64(s.World))
	put(s.RoundBytes)
	put(int64(s.Rounds))
	put(coalesce)
	put(int64(len(topo.Domain)))
	for _, d := range topo.Domain {
		put(int64(d))
	}
	for _, p := range s.Plans {
		put(int64(p.Fingerprint()))
	}
	putStrided := func(at strided.Desc) {
		put(at.Offset)
		put(at.Run)
		put(int64(len(at.Count)))
		for i := range at.Count {
			put(at.Count[i])
			put(at.Stride[i])
		}
	}
	for i := range s.Messages {
		m := &s.Messages[i]
		put(int64(m.Src))
		put(int64(m.Dst))
		put(int64(m.Round))
		put(m.Bytes)
		put(int64(m.Class))
		put(int64(m.Tensor))
		for d := range m.Box.Lo {
			put(m.Box.Lo[d])
			put(m.Box.Hi[d])
		}
		for _, segs := range [][]Segment{m.From, m.To} {
			put(int64(len(segs)))
			for _, sg := range segs {
				put(int64(sg.Tensor))
				put(int64(sg.Buf))
				putStrided(sg.At)
			}
		}
		if len(b) > 1<<16 {
			flush()
		}
	}
	flush()
	return h.Sum64()
}
