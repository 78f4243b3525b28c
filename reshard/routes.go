package reshard

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
)

// ScheduleOptions bound the memory a schedule may use. Every rank must use
// the same values (they change the schedule).
type ScheduleOptions struct {
	// ChunkBytes is the largest message: boxes are cut into chunks of at
	// most this many bytes, which pipeline through the rounds.
	ChunkBytes int64
	// StagingBytes bounds the staging memory of a rank: two rounds in
	// flight, each with its sends and its receives over the network and
	// over the local fabric, so a round moves at most StagingBytes/8 bytes
	// each way per rank and link class.
	StagingBytes int64
}

// DefaultScheduleOptions are 16 MiB chunks and 256 MiB of staging.
var DefaultScheduleOptions = ScheduleOptions{ChunkBytes: 16 << 20, StagingBytes: 256 << 20}

// Validate checks that a chunk fits a round.
func (o ScheduleOptions) Validate() error {
	if o.ChunkBytes <= 0 {
		return &FieldError{Field: "chunk bytes", Got: fmt.Sprint(o.ChunkBytes), Why: "must be positive"}
	}
	if o.StagingBytes < 8*o.ChunkBytes {
		return &FieldError{Field: "staging bytes", Got: fmt.Sprint(o.StagingBytes), Want: fmt.Sprintf(">= 8 x chunk = %d", 8*o.ChunkBytes),
			Why: "staging holds two rounds of sends and receives over two link classes, each at least one chunk"}
	}
	return nil
}

// RoundBytes returns the per-round budget of each direction and link class.
func (o ScheduleOptions) RoundBytes() int64 { return o.StagingBytes / 8 }

// Flat is the direct route: every transfer goes straight from its source
// owner to its destination, cut into chunks. Chunks are added chunk-major
// (every transfer's first chunk, then every second chunk, ...) so that all
// pairs progress together. Sources inject rho*B.
type Flat struct{}

// Name returns "flat".
func (Flat) Name() string { return "flat" }

// Schedule implements Route.
func (Flat) Schedule(plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	b, err := NewBuilder("flat", plans, topo, opts.RoundBytes())
	if err != nil {
		return nil, err
	}
	for ti, p := range plans {
		// a converting plan reads source elements and sends destination
		// (FP8) ones: chunks and messages are sized on the wire.
		srcElem, elem := p.Src().ElemSize(), p.WireElemSize()
		transfers := p.Transfers()
		chunks := make([][]placement.Box, len(transfers))
		for i, t := range transfers {
			chunks[i] = SplitBox(t.Box, elem, opts.ChunkBytes)
		}
		for k, more := 0, true; more; k++ {
			more = false
			for i, t := range transfers {
				if k >= len(chunks[i]) {
					continue
				}
				more = more || k+1 < len(chunks[i])
				sub := chunks[i][k]
				b.Add(Message{
					Src: t.Src, Dst: t.Dst, Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
					From: seg(ti, BufSrc, Describe(t.SrcLocal, sub, srcElem)),
					To:   seg(ti, BufDst, Describe(t.DstLocal, sub, elem)),
				}, 0)
			}
		}
	}
	return b.Schedule(), nil
}

// AllGatherBroadcast is the legacy baseline route: the source group
// all-gathers the full tensor (a ring per replica group, every source rank
// ending with the whole tensor in scratch), then the first source rank
// broadcasts it down a pipelined chain of all destination ranks, and every
// destination keeps its slice. The root injects the tensor once and every
// destination receives all of it. It refuses a tensor converted to FP8 in
// flight (Plan.Converts): its whole-tensor scratch holds the source dtype
// and every destination would quantize the whole tensor; use flat or hier.
type AllGatherBroadcast struct{}

// Name returns "agbcast".
func (AllGatherBroadcast) Name() string { return "agbcast" }

// Schedule implements Route.
func (AllGatherBroadcast) Schedule(plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	for ti, p := range plans {
		if p.Converts() {
			return nil, &FieldError{Field: "route", Got: "agbcast",
				Want: "flat or hier", Why: fmt.Sprintf("tensor %d converts %v to %v in flight, which the all-gather + broadcast route cannot carry (its whole-tensor scratch is in the source dtype)",
					ti, p.Src().DType(), p.Dst().DType())}
		}
	}
	b, err := NewBuilder("agbcast", plans, topo, opts.RoundBytes())
	if err != nil {
		return nil, err
	}
	for ti, p := range plans {
		agbcastTensor(b, ti, p, opts.ChunkBytes)
	}
	return b.Schedule(), nil
}

func agbcastTensor(b *Builder, ti int, p *Plan, chunk int64) {
	src, dst := p.Src(), p.Dst()
	if src.Elems() == 0 {
		return
	}
	elem := src.ElemSize()
	shape := src.Shape()
	full := placement.Box{Lo: make([]int64, len(shape)), Hi: shape}
	sm := src.Mesh()
	world := p.World()
	// gathered[r] is the round after which rank r's scratch holds the
	// whole tensor.
	gathered := make([]int, world)

	// Each source rank first copies its own shard into its scratch.
	boxes := make([]placement.Box, sm.Size())
	for i := range boxes {
		r := sm.RankAt(i)
		boxes[i], _ = src.RankBox(r)
		if !boxes[i].Empty() {
			b.Add(Message{Src: r, Dst: r, Bytes: boxes[i].Elems() * elem, Tensor: ti, Box: boxes[i],
				From: seg(ti, BufSrc, Describe(boxes[i], boxes[i], elem)),
				To:   seg(ti, BufFull, Describe(full, boxes[i], elem))}, 0)
		}
	}
	// Ring all-gather inside each replica group: the ranks that share their
	// replicate-axis coordinates, in mesh order, hold distinct shards.
	for _, ring := range replicaRings(src) {
		n := len(ring)
		for pos, owner := range ring {
			box := boxes[sm.Index(owner)]
			if box.Empty() {
				continue
			}
			for _, sub := range SplitBox(box, elem, chunk) {
				after := 0
				for hop := 1; hop < n; hop++ {
					from, to := ring[(pos+hop-1)%n], ring[(pos+hop)%n]
					m := Message{Src: from, Dst: to, Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
						From: seg(ti, BufFull, Describe(full, sub, elem)),
						To:   seg(ti, BufFull, Describe(full, sub, elem))}
					if hop == 1 {
						m.From = seg(ti, BufSrc, Describe(box, sub, elem))
					}
					r := b.Add(m, after)
					after = AfterRecv(r)
					gathered[to] = max(gathered[to], after)
				}
			}
		}
	}
	// Chain broadcast from the root down the destination ranks, chunk by
	// chunk, each hop forwarding what it received.
	root := sm.RankAt(0)
	chain := []int{root}
	dm := dst.Mesh()
	for i := 0; i < dm.Size(); i++ {
		if r := dm.RankAt(i); r != root {
			chain = append(chain, r)
		}
	}
	received := make([]int, world)
	for _, sub := range SplitBox(full, elem, chunk) {
		after := gathered[root]
		for hop := 1; hop < len(chain); hop++ {
			r := b.Add(Message{Src: chain[hop-1], Dst: chain[hop], Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
				From: seg(ti, BufFull, Describe(full, sub, elem)),
				To:   seg(ti, BufFull, Describe(full, sub, elem))}, after)
			after = AfterRecv(r)
			received[chain[hop]] = max(received[chain[hop]], after)
		}
	}
	received[root] = gathered[root]
	// Every destination keeps its slice.
	for i := 0; i < dm.Size(); i++ {
		r := dm.RankAt(i)
		box, _ := dst.RankBox(r)
		if box.Empty() {
			continue
		}
		b.Add(Message{Src: r, Dst: r, Bytes: box.Elems() * elem, Tensor: ti, Box: box,
			From: seg(ti, BufFull, Describe(full, box, elem)),
			To:   seg(ti, BufDst, Describe(box, box, elem))}, received[r])
	}
}

// replicaRings groups a layout's ranks by their coordinates on the
// replicating mesh axes; each group, in mesh order, holds every shard once.
func replicaRings(l placement.Layout) [][]int {
	m := l.Mesh()
	ps := l.Placements()
	index := map[int]int{}
	var rings [][]int
	coord := make([]int, m.NDim())
	for i := 0; i < m.Size(); i++ {
		coord = m.Coord(i, coord)
		key := 0
		for a, pl := range ps {
			if !pl.IsShard() {
				key = key*m.Dim(a) + coord[a]
			}
		}
		g, ok := index[key]
		if !ok {
			g = len(rings)
			index[key] = g
			rings = append(rings, nil)
		}
		rings[g] = append(rings[g], m.RankAt(i))
	}
	return rings
}
