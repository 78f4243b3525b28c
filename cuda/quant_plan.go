package cuda

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// This file turns an FP8 quantize-pack or partial-amax request into the
// launch of one kernel of kernels/quant.h. Like strided_plan.go it is pure
// Go, so that the tests run the kernel source on the CPU through
// kernels.EmulateQuant and compare it with package fp8.

// quantKind says which FP8 kernel a plan launches.
type quantKind int

const (
	quantPack  quantKind = iota // m2n_quant_*: quantize a box into contiguous E4M3
	quantAmax                   // m2n_amax_*: fold the box's partial amaxes into a window
	quantFused                  // m2n_fquant_*: amax, scale and quantize whole blocks in one pass
)

// quantLoads is how many vectors a lane of the quantize-pack kernels keeps
// in flight (M2N_QLOADS in kernels/quant.h).
const quantLoads = 4

// quantPlan is everything an FP8 launch needs but the grid size.
type quantPlan struct {
	kind      quantKind
	name      string // the kernel, m2n_quant_bf16_8 ...
	src       planSide
	dst, win  uint64
	nd        int
	lo, ext   [kernelDims]uint64
	wlo, wstr [kernelDims]uint64
	blockRows uint64
	blockCols uint64
	colShift  uint64
	rowElems  uint64
	chunk     uint64 // quantize: elements per work item; amax: columns per piece
	chunks    uint64 // quantize: items per row; amax: pieces per row
	group     uint64 // amax: box rows per item
	groups    uint64 // amax: row groups per matrix
	items     uint64
	teamShift uint
	vec       int
	divMode   uint64 // 0 the midpoint test (m2n_qdiv), 1 the bracket test (m2n_q2_bracket, fused only), 2 the corrected multiply (m2n_qfma)
}

// quantRequest is what a plan is made from: the grid, the source region
// (device addresses), the window of block values and, to quantize, where
// the E4M3 bytes go.
type quantRequest struct {
	kind   quantKind
	grid   fp8.Grid
	dtype  dtype.DType
	src    DevicePtr
	at     strided.Desc
	box    placement.Box
	win    DevicePtr
	blocks placement.Box // the window's blocks, 4 bytes each at win
	dst    DevicePtr
	// divMode: how the kernels make quotients exact (quantPlan.divMode)
	divMode uint64
}

// planQuant checks a request and plans its launch. An empty box gives a
// plan with items == 0. The source's runs must hold whole rows of the box
// (as every descriptor of strided.Describe and of a placement.View does).
func planQuant(q quantRequest) (quantPlan, error) {
	g := q.grid
	var esz uint64
	switch q.dtype {
	case dtype.BF16:
		esz = 2
	case dtype.F32:
		esz = 4
	default:
		return quantPlan{}, fmt.Errorf("source dtype %v: FP8 quantization takes bf16 or f32", q.dtype)
	}
	touched, err := g.Blocks(q.box)
	if err != nil {
		return quantPlan{}, err
	}
	nd := g.NDim()
	if nd > kernelDims {
		return quantPlan{}, fmt.Errorf("a %d-dim tensor: the FP8 kernels take at most %d dims", nd, kernelDims)
	}
	if len(q.blocks.Lo) != nd || len(q.blocks.Hi) != nd {
		return quantPlan{}, fmt.Errorf("window blocks %v have %d dims, the tensor %d", q.blocks, len(q.blocks.Lo), nd)
	}
	if !touched.Empty() {
		for d := range nd {
			if touched.Lo[d] < q.blocks.Lo[d] || touched.Hi[d] > q.blocks.Hi[d] {
				return quantPlan{}, fmt.Errorf("window over blocks %v does not hold blocks %v, which box %v touches", q.blocks, touched, q.box)
			}
		}
	}
	if q.kind == quantFused {
		if err := g.WholeBlocks(q.box); err != nil {
			return quantPlan{}, fmt.Errorf("%w: the fused kernels take whole blocks only", err)
		}
	}
	if err := checkDesc(q.at); err != nil {
		return quantPlan{}, fmt.Errorf("source: %w", err)
	}
	elems := uint64(q.box.Elems())
	if uint64(q.at.Bytes()) != elems*esz {
		return quantPlan{}, fmt.Errorf("%w: box %v of %v is %d bytes, the source descriptor %+v describes %d",
			strided.ErrInvalid, q.box, q.dtype, elems*esz, q.at, q.at.Bytes())
	}
	p := quantPlan{kind: q.kind, nd: nd, win: uint64(q.win), dst: uint64(q.dst)}
	switch {
	case q.divMode > 2:
		return quantPlan{}, fmt.Errorf("division mode %d: want 0, 1 or 2", q.divMode)
	case q.divMode == 1 && q.kind != quantFused:
		return quantPlan{}, errors.New("the bracket test is the fused kernels' only")
	case q.kind != quantAmax:
		p.divMode = q.divMode
	}
	shape := g.Shape()
	for d := range nd {
		p.lo[d] = uint64(q.box.Lo[d])
		p.ext[d] = uint64(q.box.Hi[d] - q.box.Lo[d])
	}
	s := uint64(1)
	for d := nd - 1; d >= 0; d-- {
		p.wlo[d] = uint64(q.blocks.Lo[d])
		p.wstr[d] = s
		s *= uint64(q.blocks.Hi[d] - q.blocks.Lo[d])
	}
	br, bc := g.BlockShape()
	p.blockRows, p.blockCols = uint64(br), uint64(bc)
	switch {
	case bits.OnesCount64(p.blockCols) == 1:
		p.colShift = uint64(bits.TrailingZeros64(p.blockCols))
	case bc >= shape[nd-1]:
		p.colShift = 63 // every column is in block column 0
	default:
		p.colShift = 64 // divide
	}
	if elems == 0 {
		return p, nil
	}
	p.rowElems = p.ext[nd-1]
	rowBytes := p.rowElems * esz
	run, dims := normalize(q.at)
	if run%rowBytes != 0 {
		return quantPlan{}, fmt.Errorf("%w: source runs of %d bytes do not hold whole box rows of %d bytes", strided.ErrInvalid, run, rowBytes)
	}
	dims = splitRun(dims, run, rowBytes)
	if len(dims) > kernelDims {
		return quantPlan{}, fmt.Errorf("%w: the source needs %d dimensions, the FP8 kernels take %d", strided.ErrInvalid, len(dims), kernelDims)
	}
	p.src.base = uint64(q.src) + uint64(q.at.Offset)
	for _, d := range dims {
		p.src.count = append(p.src.count, d.count)
		p.src.stride = append(p.src.stride, d.stride)
	}
	p.chooseLaunch(q, esz, elems/p.rowElems, br, shape)
	return p, nil
}

// chooseLaunch picks the kernel, the vector width and the work split of a
// launch over rows box rows: the widest vector every address, stride, row
// and block column allows, and chunks and teams sized for the kernel.
func (p *quantPlan) chooseLaunch(q quantRequest, esz, rows uint64, br int64, shape []int64) {
	nd := p.nd
	vecs := []int{8, 4, 2, 1}
	if esz == 4 {
		vecs = vecs[1:]
	}
	for _, v := range vecs {
		if p.vecFits(uint64(v), esz) {
			p.vec = v
			break
		}
	}
	v := uint64(p.vec)
	teamFor := func(n uint64) uint {
		t := uint(0)
		for t < maxTeamShift && uint64(1)<<t < n {
			t++
		}
		return t
	}
	dt := "bf16"
	if esz == 4 {
		dt = "f32"
	}
	switch q.kind {
	case quantPack:
		p.name = fmt.Sprintf("m2n_quant_%s_%d", dt, v)
		p.chunk = min(p.rowElems, 4*blockThreads*v)
		p.chunks = (p.rowElems + p.chunk - 1) / p.chunk
		p.items = rows * p.chunks
		// a team small enough that each lane has quantLoads vectors of
		// the chunk to keep in flight
		p.teamShift = teamFor((p.chunk/v + quantLoads - 1) / quantLoads)
	case quantFused:
		// a block of the box per item, numbered as the amax items are
		p.name = fmt.Sprintf("m2n_fquant_%s_%d", dt, v)
		p.group, p.chunk = p.blockRows, p.blockCols
		loR, hiR := p.lo[nd-2], p.lo[nd-2]+p.ext[nd-2]
		loC, hiC := p.lo[nd-1], p.lo[nd-1]+p.ext[nd-1]
		p.groups = (hiR+p.group-1)/p.group - loR/p.group
		p.chunks = (hiC+p.chunk-1)/p.chunk - loC/p.chunk
		p.items = rows / p.ext[nd-2] * p.groups * p.chunks
		// a team per block, sized for about fusedLaneVecs() vectors per
		// lane of the largest tile (shared memory holds fusedRegs)
		tile := min(p.blockRows, p.ext[nd-2]) * (min(p.blockCols, p.rowElems) / v)
		lv := fusedLaneVecs()
		p.teamShift = teamFor((tile + lv - 1) / lv)
	case quantAmax:
		p.name = fmt.Sprintf("m2n_amax_%s_%d", dt, v)
		if p.colShift == 63 {
			p.chunk = 4 * blockThreads * v
		} else {
			p.chunk = p.blockCols
		}
		switch {
		case br == 1:
			p.group = 1
		case br >= shape[nd-2]:
			p.group = 8 // one block row: any grouping stays in it
		default:
			p.group = gcd(p.blockRows, 8)
		}
		loR, hiR := p.lo[nd-2], p.lo[nd-2]+p.ext[nd-2]
		loC, hiC := p.lo[nd-1], p.lo[nd-1]+p.ext[nd-1]
		p.groups = (hiR+p.group-1)/p.group - loR/p.group
		p.chunks = (hiC+p.chunk-1)/p.chunk - loC/p.chunk
		p.items = rows / p.ext[nd-2] * p.groups * p.chunks
		p.teamShift = teamFor(min(p.chunk, p.rowElems) / v)
	}
}

// vecFits reports whether vectors of v elements of esz bytes can do the
// launch: aligned source rows, strides and destination, whole vectors per
// row and per work item, and no vector across a block column.
func (p *quantPlan) vecFits(v, esz uint64) bool {
	w := v * esz
	if p.src.base%w != 0 || p.rowElems%v != 0 {
		return false
	}
	for _, s := range p.src.stride {
		if s%w != 0 {
			return false
		}
	}
	loC := p.lo[p.nd-1]
	switch p.kind {
	case quantPack, quantFused:
		if p.dst%v != 0 {
			return false
		}
		if p.colShift != 63 && (loC%v != 0 || p.blockCols%v != 0) {
			return false
		}
	case quantAmax:
		// pieces start at multiples of the piece width, box-relative
		// from loC
		if loC%v != 0 || (p.colShift != 63 && p.blockCols%v != 0) {
			return false
		}
	}
	return true
}

// grid returns the number of blocks to launch, as copyPlan.grid does.
func (p *quantPlan) grid(resident int) int {
	teams := uint64(blockThreads >> p.teamShift)
	need := (p.items + teams - 1) / teams
	limit := resident
	switch {
	case p.kind == quantFused:
		limit = fusedGridCap // a block per round of items
	case p.kind == quantPack && p.chunks > 1:
		limit = maxGridBlocks
	}
	return clampGrid(need, limit)
}

// fusedGridCap caps the fused kernels' grid: maxGridBlocks, less in tests
// (SetFusedGridCap) so that blocks run several rounds of items, as on
// tensors of more than maxGridBlocks teams' blocks.
var fusedGridCap = maxGridBlocks

// fusedLaneVecs is how many vectors of its tile the plan gives each lane of
// a fused kernel's team: M2N_FUSED_LANE_VECS if set to 1 to 8 (package
// envopts refuses other values; for measuring on a GPU without a rebuild),
// else fusedRegs, all a lane stages. Fewer lanes a tile means fewer warps
// computing the same tile's geometry: on an H200 row scaling of 4 KiB rows
// ran in 812-832 us per GiB with 8 against 966-1009 us with 4, block
// scaling alike (484-503 us), bench/results/h200-fp8-kernels.txt.
func fusedLaneVecs() uint64 {
	if v := envDigit("M2N_FUSED_LANE_VECS"); v != "" {
		return uint64(v[0] - '0')
	}
	return fusedRegs
}

// fusedRegs is how many vectors a thread of the fused kernels keeps in
// registers (M2N_FREGS in kernels/quant.h): blocks of up to
// blockThreads*fusedRegs vectors are read once.
const fusedRegs = 8
