package reshard

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Options change how a plan is derived. Every rank must pass the same
// options; they are part of the plan's fingerprint.
type Options struct {
	// StripeReplicas spreads the transfers out of a replicated source region
	// over all the source replicas that hold it, round-robin in plan order,
	// so that every replica injects a share. When false, a region has one
	// owner: the first replica in mesh order.
	StripeReplicas bool
}

// Transfer is one box moving from one source rank to one destination rank.
// Box is the global region; SrcAt and DstAt say where its bytes sit in the
// source's and the destination's local buffers, each in its own layout's
// element size (they differ for a plan that converts to FP8: see
// Plan.Converts). When Src == Dst the rank is in both meshes and the
// transfer is a local copy.
type Transfer struct {
	Src, Dst int
	// DstShard identifies the destination region Dst holds: destination ranks
	// with equal DstShard are replicas of each other.
	DstShard int
	Box      placement.Box
	SrcAt    strided.Desc
	DstAt    strided.Desc
	// SrcLocal and DstLocal are the whole regions the source and the
	// destination hold, so that any part of Box can be described with
	// Describe on either side.
	SrcLocal, DstLocal placement.Box
}

// bytes returns the size of the transfer as the destination receives it
// (and as it crosses the wire): the box in the destination's element size.
func (t Transfer) bytes() int64 { return t.DstAt.Bytes() }

// overlap is one nonempty intersection of a source part and a destination
// part along one tensor dim.
type overlap struct {
	src, dst int32 // part indices of dim d (Layout.Part)
	iv       placement.Interval
}

// piece is the compact form of a Transfer: the ranks and, per tensor dim,
// the overlap it covers. A Transfer is materialized from it on demand so
// that a plan costs a few dozen bytes per transfer, whatever the box.
type piece struct {
	src, dst int32
	dstShard int32
	ov       [placement.MaxTensorDims]int32
}

// Plan is the complete, deterministic schedule of a reshard: for every
// destination rank, the boxes it needs and the one source rank that sends
// each. Every rank derives the same Plan from the same inputs, with no
// communication; Fingerprint identifies it. A Plan is immutable and safe for
// concurrent use.
type Plan struct {
	src, dst placement.Layout
	world    int
	opts     Options

	overlaps [][]overlap // per tensor dim
	pieces   []piece     // ordered by destination rank, then box
	bySrc    []int32     // piece indices ordered by source rank, then plan order
	srcStart []int32     // bySrc[srcStart[r]:srcStart[r+1]] are rank r's sends
	dstStart []int32     // pieces[dstStart[r]:dstStart[r+1]] are rank r's receives

	fingerprint uint64
}

// maxTransfers bounds the transfers of one plan, about 3 GiB of plan (see
// planBytes): NewPlan refuses more with a FieldError naming the count and
// the bytes, before allocating anything that grows with it.
const maxTransfers = 1 << 26

// transferBytes is what one transfer costs a plan: its piece (three int32
// and one int32 per possible dim) and its entry in the by-source index.
const transferBytes = 4*(3+placement.MaxTensorDims) + 4

// planBytes estimates the memory of a plan of the given transfers over a
// communicator of world ranks (the transfers, the per-rank indices and the
// per-dim overlaps, not the layouts), saturating at math.MaxInt64.
func planBytes(transfers int64, world int) int64 {
	return checked.SatSum(checked.SatMul(max(transfers, 0), transferBytes), checked.SatMul(int64(max(world, 0))+1, 8))
}

// PlanSize returns how many transfers NewPlan(src, dst, world, opts) derives
// (for any opts) and planBytes of them, without building the plan: it
// sweeps the split points, which costs the parts of every dim, and counts.
// A caller compares the bytes with the memory it has before planning.
// Counts above maxTransfers are returned too (NewPlan refuses them); the
// error is checkCompatible's, or a count that overflows int64.
func PlanSize(src, dst placement.Layout, world int) (transfers, bytes int64, err error) {
	if err := checkCompatible(src, dst, world); err != nil {
		return 0, 0, err
	}
	byDstPart := make([][][2]int32, src.NDim())
	for d := range byDstPart {
		_, byDstPart[d] = sweep(src, dst, d)
	}
	n, err := countTransfers(dst, byDstPart)
	if err != nil {
		return 0, 0, err
	}
	return n, planBytes(n, world), nil
}

// countTransfers counts the transfers of a plan from the overlaps that
// meet every destination part: per destination rank, the product over dims.
func countTransfers(dst placement.Layout, byDstPart [][][2]int32) (int64, error) {
	dstMesh := dst.Mesh()
	coord := make([]int, dstMesh.NDim())
	var total int64
	for mi := 0; mi < dstMesh.Size(); mi++ {
		coord = dstMesh.Coord(mi, coord)
		n := int64(1)
		ok := true
		for d := range byDstPart {
			rng := byDstPart[d][dst.PartIndex(d, coord)]
			if n, ok = checked.Mul(n, int64(rng[1]-rng[0])); !ok {
				break
			}
		}
		if ok {
			total, ok = checked.Add(total, n)
		}
		if !ok {
			return 0, &FieldError{Field: "plan", Got: "more transfers than an int64 counts", Want: fmt.Sprintf("at most %d", maxTransfers),
				Why: "the layouts cut the tensor into too many pieces"}
		}
	}
	return total, nil
}

// NewPlan derives the plan that moves a tensor from the src layout to the dst
// layout over a communicator of world ranks. Both meshes hold
// communicator-local ranks; they may be disjoint or share ranks (a shared
// rank copies locally). The layouts must agree on global shape and dtype.
//
// Intersections are found by sweeping each tensor dim's sorted split points,
// so the cost follows the number of transfers, not the product of the mesh
// sizes. The transfers are counted before anything that grows with them is
// allocated: more than maxTransfers is a FieldError naming the count and
// the bytes the plan would take (PlanSize gives both without planning).
func NewPlan(src, dst placement.Layout, world int, opts Options) (*Plan, error) {
	if err := checkCompatible(src, dst, world); err != nil {
		return nil, err
	}
	p := &Plan{src: src, dst: dst, world: world, opts: opts}
	nd := src.NDim()
	p.overlaps = make([][]overlap, nd)
	// byDstPart[d][j] is the range of overlaps[d] that meet destination part j.
	byDstPart := make([][][2]int32, nd)
	for d := 0; d < nd; d++ {
		p.overlaps[d], byDstPart[d] = sweep(src, dst, d)
	}

	srcReplicas := newReplicaSet(src)
	var stripe []int32
	if opts.StripeReplicas && srcReplicas.count > 1 {
		stripe = make([]int32, srcReplicas.regions)
	}

	dstMesh := dst.Mesh()
	order := make([]int, dstMesh.Size()) // destination mesh indices by rank
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return dstMesh.RankAt(a) - dstMesh.RankAt(b) })

	// count the transfers first so that the plan is allocated once, and
	// refuse a plan too large before allocating it.
	total64, err := countTransfers(dst, byDstPart)
	if err != nil {
		return nil, err
	}
	if total64 > maxTransfers {
		return nil, &FieldError{Field: "plan", Got: fmt.Sprintf("%d transfers (about %d bytes of plan)", total64, planBytes(total64, world)),
			Want: fmt.Sprintf("at most %d transfers", maxTransfers), Why: "the layouts cut the tensor into too many pieces"}
	}
	total := int(total64)
	coord := make([]int, dstMesh.NDim())
	p.pieces = make([]piece, 0, total)
	p.dstStart = make([]int32, world+1)
	srcCoord := make([]int, src.Mesh().NDim())
	var parts, lens [placement.MaxTensorDims]int32
	var odo [placement.MaxTensorDims]int32
	for _, mi := range order {
		rank := dstMesh.RankAt(mi)
		p.dstStart[rank] = int32(len(p.pieces))
		coord = dstMesh.Coord(mi, coord)
		shard := int32(0)
		empty := false
		for d := 0; d < nd; d++ {
			j := dst.PartIndex(d, coord)
			shard = shard*int32(dst.NumParts(d)) + int32(j)
			rng := byDstPart[d][j]
			parts[d], lens[d] = rng[0], rng[1]-rng[0]
			odo[d] = 0
			if lens[d] == 0 {
				empty = true
			}
		}
		if empty {
			continue
		}
		// holder: is this destination rank also a source replica? Then the
		// parts it holds as a source can be copied locally.
		localSrc := src.Mesh().Index(rank)
		if localSrc >= 0 {
			srcCoord = src.Mesh().Coord(localSrc, srcCoord)
		}
		for {
			pc := piece{dst: int32(rank), dstShard: shard}
			region := int32(0)
			local := localSrc >= 0
			for d := 0; d < nd; d++ {
				k := parts[d] + odo[d]
				pc.ov[d] = k
				sp := p.overlaps[d][k].src
				region = region*int32(src.NumParts(d)) + sp
				if local && int(sp) != src.PartIndex(d, srcCoord) {
					local = false
				}
			}
			switch {
			case local:
				pc.src = int32(rank)
			case stripe != nil:
				pc.src = int32(srcReplicas.owner(int(region), int(stripe[region])%srcReplicas.count))
				stripe[region]++
			default:
				pc.src = int32(srcReplicas.owner(int(region), 0))
			}
			p.pieces = append(p.pieces, pc)
			// advance the odometer, last dim fastest.
			d := nd - 1
			for ; d >= 0; d-- {
				odo[d]++
				if odo[d] < lens[d] {
					break
				}
				odo[d] = 0
			}
			if d < 0 {
				break
			}
		}
	}
	// dstStart holds each destination's first piece; fill the gaps so that
	// pieces[dstStart[r]:dstStart[r+1]] works for every rank.
	p.dstStart[world] = int32(len(p.pieces))
	next := int32(len(p.pieces))
	for r := world - 1; r >= 0; r-- {
		if dstMesh.Contains(r) {
			next = p.dstStart[r]
		} else {
			p.dstStart[r] = next
		}
	}
	p.indexSources()
	p.fingerprint = fingerprint(src, dst, world, opts)
	return p, nil
}

// sweep intersects the source and destination parts of tensor dim d by
// walking both sorted lists of split points once. It returns the overlaps in
// destination order and, per destination part, the range of overlaps that
// meet it.
func sweep(src, dst placement.Layout, d int) ([]overlap, [][2]int32) {
	ns, nd := src.NumParts(d), dst.NumParts(d)
	// Nonempty parts are disjoint and in ascending order of Lo; empty ones
	// are skipped by the walk.
	out := make([]overlap, 0, ns+nd)
	ranges := make([][2]int32, nd)
	i := 0
	for j := range nd {
		dv := dst.Part(d, j)
		ranges[j] = [2]int32{int32(len(out)), int32(len(out))}
		if dv.Empty() {
			continue
		}
		for i < ns && (src.Part(d, i).Empty() || src.Part(d, i).Hi <= dv.Lo) {
			i++
		}
		for k := i; k < ns; k++ {
			sv := src.Part(d, k)
			if sv.Lo >= dv.Hi {
				break
			}
			if sv.Empty() {
				continue
			}
			iv := placement.Interval{Lo: max(sv.Lo, dv.Lo), Hi: min(sv.Hi, dv.Hi)}
			out = append(out, overlap{src: int32(k), dst: int32(j), iv: iv})
		}
		ranges[j][1] = int32(len(out))
	}
	return out, ranges
}

// replicaSet maps a source region (a row-major index over the per-dim part
// counts) and a replica number to the source rank that holds it.
type replicaSet struct {
	count   int   // replicas per region
	regions int   // distinct regions
	ranks   []int // ranks[region*count+rep]
}

func newReplicaSet(l placement.Layout) replicaSet {
	rs := replicaSet{count: 1, regions: 1}
	var repAxes []int
	for a, pl := range l.Placements() {
		if pl == placement.Replicate() {
			repAxes = append(repAxes, a)
			rs.count *= l.Mesh().Dim(a)
		}
	}
	for d := 0; d < l.NDim(); d++ {
		rs.regions *= l.NumParts(d)
	}
	m := l.Mesh()
	rs.ranks = make([]int, rs.regions*rs.count)
	coord := make([]int, m.NDim())
	for i := 0; i < m.Size(); i++ {
		coord = m.Coord(i, coord)
		region := 0
		for d := 0; d < l.NDim(); d++ {
			region = region*l.NumParts(d) + l.PartIndex(d, coord)
		}
		rep := 0
		for _, a := range repAxes {
			rep = rep*m.Dim(a) + coord[a]
		}
		rs.ranks[region*rs.count+rep] = m.RankAt(i)
	}
	return rs
}

// owner returns the rank of replica rep of region.
func (rs replicaSet) owner(region, rep int) int { return rs.ranks[region*rs.count+rep] }

func (p *Plan) indexSources() {
	p.srcStart = make([]int32, p.world+1)
	for _, pc := range p.pieces {
		p.srcStart[pc.src+1]++
	}
	for r := 0; r < p.world; r++ {
		p.srcStart[r+1] += p.srcStart[r]
	}
	fill := slices.Clone(p.srcStart[:p.world])
	p.bySrc = make([]int32, len(p.pieces))
	for i, pc := range p.pieces {
		p.bySrc[fill[pc.src]] = int32(i)
		fill[pc.src]++
	}
}

// Src returns the source layout.
func (p *Plan) Src() placement.Layout { return p.src }

// Dst returns the destination layout.
func (p *Plan) Dst() placement.Layout { return p.dst }

// World returns the communicator size the plan was derived for.
func (p *Plan) World() int { return p.world }

// options returns the options the plan was derived with.
func (p *Plan) options() Options { return p.opts }

// Fingerprint returns a 64-bit hash of the layouts, options and world size.
// Ranks that compare equal fingerprints run the same plan.
func (p *Plan) Fingerprint() uint64 { return p.fingerprint }

// Len returns the number of transfers.
func (p *Plan) Len() int { return len(p.pieces) }

// Transfer returns transfer i, 0 <= i < Len(). Transfers are ordered by
// destination rank, then by box in row-major order of its corner.
func (p *Plan) Transfer(i int) Transfer {
	pc := &p.pieces[i]
	nd := p.src.NDim()
	// one allocation holds the boxes and both descriptors.
	buf := make([]int64, 10*nd)
	t := Transfer{Src: int(pc.src), Dst: int(pc.dst), DstShard: int(pc.dstShard)}
	t.Box = placement.Box{Lo: buf[0:nd:nd], Hi: buf[nd : 2*nd : 2*nd]}
	t.SrcLocal = placement.Box{Lo: buf[6*nd : 7*nd : 7*nd], Hi: buf[7*nd : 8*nd : 8*nd]}
	t.DstLocal = placement.Box{Lo: buf[8*nd : 9*nd : 9*nd], Hi: buf[9*nd : 10*nd : 10*nd]}
	var srcLocal, dstLocal, srcRel, dstRel, count [placement.MaxTensorDims]int64
	for d := 0; d < nd; d++ {
		ov := p.overlaps[d][pc.ov[d]]
		t.Box.Lo[d], t.Box.Hi[d] = ov.iv.Lo, ov.iv.Hi
		count[d] = ov.iv.Len()
		sp := p.src.Part(d, int(ov.src))
		dp := p.dst.Part(d, int(ov.dst))
		t.SrcLocal.Lo[d], t.SrcLocal.Hi[d] = sp.Lo, sp.Hi
		t.DstLocal.Lo[d], t.DstLocal.Hi[d] = dp.Lo, dp.Hi
		srcLocal[d], srcRel[d] = sp.Len(), ov.iv.Lo-sp.Lo
		dstLocal[d], dstRel[d] = dp.Len(), ov.iv.Lo-dp.Lo
	}
	t.SrcAt = strided.DescribeInto(srcLocal[:nd], srcRel[:nd], count[:nd], p.src.ElemSize(), buf[2*nd:4*nd:4*nd])
	t.DstAt = strided.DescribeInto(dstLocal[:nd], dstRel[:nd], count[:nd], p.dst.ElemSize(), buf[4*nd:6*nd:6*nd])
	return t
}

// Ends returns transfer i's source and destination ranks and destination
// shard (Transfer(i)'s Src, Dst and DstShard) without materializing its
// boxes, 0 <= i < Len().
func (p *Plan) Ends(i int) (src, dst, dstShard int) {
	pc := &p.pieces[i]
	return int(pc.src), int(pc.dst), int(pc.dstShard)
}

// SameRegion reports whether transfers i and j carry the same box out of
// the same source region: Transfer(i).Box.Equal(Transfer(j).Box) and
// Transfer(i).SrcLocal.Equal(Transfer(j).SrcLocal), without materializing
// either, 0 <= i, j < Len().
func (p *Plan) SameRegion(i, j int) bool {
	a, b := &p.pieces[i], &p.pieces[j]
	for d := 0; d < p.src.NDim(); d++ {
		oa, ob := &p.overlaps[d][a.ov[d]], &p.overlaps[d][b.ov[d]]
		if oa.iv != ob.iv || p.src.Part(d, int(oa.src)) != p.src.Part(d, int(ob.src)) {
			return false
		}
	}
	return true
}

// transfers materializes every transfer, in plan order.
func (p *Plan) transfers() []Transfer {
	out := make([]Transfer, len(p.pieces))
	for i := range out {
		out[i] = p.Transfer(i)
	}
	return out
}

// Recvs returns the indices of the transfers that rank receives, in plan
// order. The slice must not be modified.
func (p *Plan) Recvs(rank int) []int32 {
	if rank < 0 || rank >= p.world {
		return nil
	}
	lo, hi := p.dstStart[rank], p.dstStart[rank+1]
	idx := make([]int32, hi-lo)
	for i := range idx {
		idx[i] = lo + int32(i)
	}
	return idx
}

// sends returns the indices of the transfers that rank sends, in plan
// order. The slice must not be modified.
func (p *Plan) sends(rank int) []int32 {
	if rank < 0 || rank >= p.world {
		return nil
	}
	return p.bySrc[p.srcStart[rank]:p.srcStart[rank+1]]
}

// Converts reports whether the plan converts its tensor in flight: a bf16
// or f32 source to an fp8e4m3 destination. Its transfers then carry one
// byte per element (the destination's element size), which the sender
// quantizes while packing (see Spec.Scale).
func (p *Plan) Converts() bool { return p.src.DType() != p.dst.DType() }

// totalBytes returns the total bytes of all transfers (every destination
// replica counts), in the destination's element size (what crosses the
// wire), saturating at math.MaxInt64.
func (p *Plan) totalBytes() int64 {
	var n int64
	for i := range p.pieces {
		n = checked.SatSum(n, p.pieceBytes(i))
	}
	return n
}

func (p *Plan) pieceBytes(i int) int64 {
	n := p.dst.ElemSize()
	for d := 0; d < p.src.NDim(); d++ {
		n *= p.overlaps[d][p.pieces[i].ov[d]].iv.Len()
	}
	return n
}

// rankBytes returns, for every rank, the bytes it sends and receives,
// counting local copies (Src == Dst) on both sides, saturating at
// math.MaxInt64.
func (p *Plan) rankBytes() (sent, recv []int64) {
	sent, recv = make([]int64, p.world), make([]int64, p.world)
	for i, pc := range p.pieces {
		b := p.pieceBytes(i)
		sent[pc.src] = checked.SatSum(sent[pc.src], b)
		recv[pc.dst] = checked.SatSum(recv[pc.dst], b)
	}
	return sent, recv
}

// checkCompatible reports whether a tensor can move from src to dst over a
// communicator of world ranks: same global shape and dtype (or a bf16 or
// f32 source to an fp8e4m3 destination, converted in flight; ConvertsTo),
// both meshes inside the communicator.
func checkCompatible(src, dst placement.Layout, world int) error {
	if world < 1 {
		return fmt.Errorf("communicator size %d, want at least 1", world)
	}
	if !slices.Equal(src.Shape(), dst.Shape()) {
		return &FieldError{Field: "shape", Got: placement.FormatShape(dst.Shape()),
			Want: placement.FormatShape(src.Shape()), Why: "source and destination global shapes differ"}
	}
	if src.DType() != dst.DType() && !ConvertsTo(src.DType(), dst.DType()) {
		return &FieldError{Field: "dtype", Got: dst.DType().String(), Want: src.DType().String(),
			Why: fmt.Sprintf("source and destination dtypes differ, and the only conversion in flight is bf16 or f32 to %v", dtype.FP8E4M3)}
	}
	if err := src.Mesh().Validate(world); err != nil {
		return &FieldError{Field: "source mesh", Got: src.Mesh().String(), Why: err.Error()}
	}
	if err := dst.Mesh().Validate(world); err != nil {
		return &FieldError{Field: "destination mesh", Got: dst.Mesh().String(), Why: err.Error()}
	}
	return nil
}

// ConvertsTo reports whether a tensor of dtype src can be converted in
// flight to dtype dst: bf16 or f32 to fp8e4m3 (FP8 E4M3 by package fp8's
// rule, torch's).
func ConvertsTo(src, dst dtype.DType) bool {
	return dst == dtype.FP8E4M3 && (src == dtype.BF16 || src == dtype.F32)
}

// FieldError reports an input field whose value cannot be used.
type FieldError struct {
	Field string // which input: "shape", "dtype", "source mesh", ...
	Got   string // the value given
	Want  string // what was expected, if one value was
	Why   string // the rule it breaks
}

func (e *FieldError) Error() string {
	s := e.Field + " " + e.Got
	if e.Want != "" {
		s += ", want " + e.Want
	}
	return s + ": " + e.Why
}
