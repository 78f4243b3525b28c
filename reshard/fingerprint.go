package reshard

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/m2n-dev/m2n/placement"
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
		d, shard := p.ShardDim() // 0, false for Replicate
		kind := int64(0)
		if shard {
			kind = 1
		}
		put(kind)
		put(int64(d))
	}
	return b
}
