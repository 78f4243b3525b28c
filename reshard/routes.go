package reshard

import (
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
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

// Validate checks that a chunk fits a round: a positive chunk, and
// staging of at least 8 chunks (two rounds in flight, sends and receives,
// two link classes). Sizes are checked, not wrapped: a chunk so large that
// 8 x chunk overflows int64 is an error naming it.
func (o ScheduleOptions) Validate() error {
	if o.ChunkBytes <= 0 {
		return &FieldError{Field: "chunk bytes", Got: fmt.Sprint(o.ChunkBytes), Why: "must be positive"}
	}
	need, ok := checked.Mul(8, o.ChunkBytes)
	if !ok {
		return &FieldError{Field: "chunk bytes", Got: fmt.Sprint(o.ChunkBytes), Want: fmt.Sprintf("at most %d", int64(math.MaxInt64/8)),
			Why: "staging must hold 8 chunks (two rounds of sends and receives over two link classes), and 8 x chunk overflows int64"}
	}
	if o.StagingBytes < need {
		return &FieldError{Field: "staging bytes", Got: fmt.Sprint(o.StagingBytes), Want: fmt.Sprintf(">= 8 x chunk = %d", need),
			Why: "staging holds two rounds of sends and receives over two link classes, each at least one chunk"}
	}
	return nil
}

// RoundBytes returns the per-round budget of each direction and link class.
func (o ScheduleOptions) RoundBytes() int64 { return o.StagingBytes / 8 }

// Flat is the direct route: every transfer goes straight from its source
// owner to its destination, cut into chunks. Chunks are added chunk-major
// (every transfer's first chunk, then every second chunk, ...) so that all
// pairs progress together. Sources inject rho*B. The messages are counted
// before any box is cut: more than MaxMessages is an error naming the
// count. It is a value of an unexported type, as AllGatherBroadcast is:
// the route has no options.
var Flat BucketRoute = flat{}

type flat struct{}

func (flat) Name() string { return "flat" }

func (f flat) Schedule(plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error) {
	return scheduleAll(f, plans, topo, opts)
}

func (flat) AddTensors(b *Builder, plans []*Plan, tensors []int, _ Topology, opts ScheduleOptions) error {
	// count first: every transfer is at least one message; then chunks,
	// transfers materialised one at a time, chunks not at all.
	var total int64
	for _, ti := range tensors {
		total = checked.SatSum(total, int64(plans[ti].Len()))
	}
	if total > MaxMessages {
		return tooManyMessages("flat", total)
	}
	total = 0
	for _, ti := range tensors {
		p := plans[ti]
		elem := p.Dst().ElemSize()
		for i := 0; i < p.Len(); i++ {
			n, err := CountChunks(p.Transfer(i).Box, elem, opts.ChunkBytes)
			if err != nil {
				return err
			}
			if total = checked.SatSum(total, n); total > MaxMessages {
				return tooManyMessages("flat", flatCount(plans, tensors, opts.ChunkBytes))
			}
		}
	}
	if err := b.Expect(total); err != nil {
		return err
	}
	for _, ti := range tensors {
		p := plans[ti]
		// a converting plan reads source elements and sends destination
		// (FP8) ones: chunks and messages are sized on the wire.
		srcElem, elem := p.Src().ElemSize(), p.Dst().ElemSize() // messages carry the destination dtype
		transfers := p.transfers()
		chunks := make([][]placement.Box, len(transfers))
		for i, t := range transfers {
			var err error
			if chunks[i], err = SplitBox(t.Box, elem, opts.ChunkBytes); err != nil {
				return err
			}
		}
		// active lists, in plan order, the transfers with chunks left, so
		// that a long transfer does not make every round walk them all.
		active := make([]int, len(transfers))
		for i := range active {
			active[i] = i
		}
		for k := 0; len(active) > 0; k++ {
			next := active[:0]
			for _, i := range active {
				t := transfers[i]
				sub := chunks[i][k]
				b.Add(Message{
					Src: t.Src, Dst: t.Dst, Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
					From: seg(ti, BufSrc, strided.Describe(t.SrcLocal, sub, srcElem)),
					To:   seg(ti, BufDst, strided.Describe(t.DstLocal, sub, elem)),
				}, 0)
				if k+1 < len(chunks[i]) {
					next = append(next, i)
				}
			}
			active = next
		}
	}
	return b.Err()
}

// flatCount counts the flat route's messages of tensors in full
// (saturating), for the error that refuses too many.
func flatCount(plans []*Plan, tensors []int, chunk int64) int64 {
	var total int64
	for _, ti := range tensors {
		p := plans[ti]
		for i := 0; i < p.Len(); i++ {
			n, _ := CountChunks(p.Transfer(i).Box, p.Dst().ElemSize(), chunk)
			total = checked.SatSum(total, n)
		}
	}
	return total
}

// AllGatherBroadcast is the legacy baseline route: the source group
// all-gathers the full tensor (a ring per replica group, every source rank
// ending with the whole tensor in scratch), then the first source rank
// broadcasts it down a pipelined chain of all destination ranks, and every
// destination keeps its slice. The root injects the tensor once and every
// destination receives all of it. It refuses a tensor converted to FP8 in
// flight (Plan.Converts): its whole-tensor scratch holds the source dtype
// and every destination would quantize the whole tensor; use flat or hier.
// Its Name is "agbcast".
var AllGatherBroadcast BucketRoute = allGatherBroadcast{}

type allGatherBroadcast struct{}

func (allGatherBroadcast) Name() string { return "agbcast" }

func (a allGatherBroadcast) Schedule(plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error) {
	return scheduleAll(a, plans, topo, opts)
}

func (allGatherBroadcast) AddTensors(b *Builder, plans []*Plan, tensors []int, _ Topology, opts ScheduleOptions) error {
	for _, ti := range tensors {
		if p := plans[ti]; p.Converts() {
			return &FieldError{Field: "route", Got: "agbcast",
				Want: "flat or hier", Why: fmt.Sprintf("tensor %d converts %v to %v in flight, which the all-gather + broadcast route cannot carry (its whole-tensor scratch is in the source dtype)",
					ti, p.Src().DType(), p.Dst().DType())}
		}
	}
	var total int64
	for _, ti := range tensors {
		n, err := agbcastCount(plans[ti], opts.ChunkBytes)
		if err != nil {
			return err
		}
		total = checked.SatSum(total, n)
	}
	if err := b.Expect(total); err != nil {
		return err
	}
	for _, ti := range tensors {
		if err := agbcastTensor(b, ti, plans[ti], opts.ChunkBytes); err != nil {
			return err
		}
	}
	return b.Err()
}

// agbcastCount counts the messages agbcastTensor adds for p, saturating.
func agbcastCount(p *Plan, chunk int64) (int64, error) {
	src, dst := p.Src(), p.Dst()
	if src.Elems() == 0 {
		return 0, nil
	}
	elem := src.ElemSize()
	sm := src.Mesh()
	var n int64
	for _, ring := range replicaRings(src) {
		for _, owner := range ring {
			box, _ := src.RankBox(owner)
			if box.Empty() {
				continue
			}
			c, err := CountChunks(box, elem, chunk)
			if err != nil {
				return 0, err
			}
			n = checked.SatSum(n, checked.SatSum(checked.SatMul(c, int64(len(ring)-1)), 1)) // the ring hops and the owner's copy
		}
	}
	shape := src.Shape()
	full := placement.Box{Lo: make([]int64, len(shape)), Hi: shape}
	c, err := CountChunks(full, elem, chunk)
	if err != nil {
		return 0, err
	}
	chain := int64(dst.Mesh().Size()) // the root, then every destination but the root
	if !dst.Mesh().Contains(sm.RankAt(0)) {
		chain++
	}
	n = checked.SatSum(n, checked.SatMul(c, chain-1))
	return checked.SatSum(n, int64(dst.Mesh().Size())), nil // every destination keeps its slice
}

func agbcastTensor(b *Builder, ti int, p *Plan, chunk int64) error {
	src, dst := p.Src(), p.Dst()
	if src.Elems() == 0 {
		return nil
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
				From: seg(ti, BufSrc, strided.Describe(boxes[i], boxes[i], elem)),
				To:   seg(ti, BufFull, strided.Describe(full, boxes[i], elem))}, 0)
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
			subs, err := SplitBox(box, elem, chunk)
			if err != nil {
				return err
			}
			for _, sub := range subs {
				after := 0
				for hop := 1; hop < n; hop++ {
					from, to := ring[(pos+hop-1)%n], ring[(pos+hop)%n]
					m := Message{Src: from, Dst: to, Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
						From: seg(ti, BufFull, strided.Describe(full, sub, elem)),
						To:   seg(ti, BufFull, strided.Describe(full, sub, elem))}
					if hop == 1 {
						m.From = seg(ti, BufSrc, strided.Describe(box, sub, elem))
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
	subs, err := SplitBox(full, elem, chunk)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		after := gathered[root]
		for hop := 1; hop < len(chain); hop++ {
			r := b.Add(Message{Src: chain[hop-1], Dst: chain[hop], Bytes: sub.Elems() * elem, Tensor: ti, Box: sub,
				From: seg(ti, BufFull, strided.Describe(full, sub, elem)),
				To:   seg(ti, BufFull, strided.Describe(full, sub, elem))}, after)
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
			From: seg(ti, BufFull, strided.Describe(full, box, elem)),
			To:   seg(ti, BufDst, strided.Describe(box, box, elem))}, received[r])
	}
	return nil
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
			if pl == placement.Replicate() {
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
