package refit

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
)

// scheduleVersion changes whenever the encoding below or the meaning of a
// reshard.Schedule's fields changes (a change that alters schedules also
// moves reshard's golden TestSchedulesUnchanged digest).
const scheduleVersion = 1

// scheduleFingerprint is the call's identity on the wire: a hash of its
// schedule as built (route, world, round budget, every message: ranks,
// round, bytes, link class, tensor, box and the regions on both sides),
// the plans it was built from, the topology and the coalescing threshold:
// ranks whose fingerprints are equal run the same wire protocol.
func scheduleFingerprint(s *reshard.Schedule, topo reshard.Topology, coalesce int64) uint64 {
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
		for _, segs := range [][]reshard.Segment{m.From, m.To} {
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
