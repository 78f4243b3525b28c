package cuda

import (
	"fmt"

	"github.com/m2n-dev/m2n/strided"
)

// This file turns a (destination, source) pair of strided.Desc descriptors into
// the launch of one strided-copy kernel (kernels/strided.cu). It is pure Go,
// so the tests check it on the CPU against HostStridedCopy, running the
// kernel source itself through kernels.Emulate.

const (
	// blockThreads is the kernels' block size (their __launch_bounds__).
	blockThreads = 256
	// maxTeamShift caps a team at one block.
	maxTeamShift = 8
	// chunkElems is the most elements one team copies per work item: four
	// per thread of a full block, one unrolled round. Longer rows are split
	// so that a single long run still spreads over every SM.
	chunkElems = 4 * blockThreads
	// maxGridBlocks caps a launch; the kernels' grid-stride loop does the
	// rest.
	maxGridBlocks = 1 << 22
	// kernelDims is M2N_MAX_DIMS in kernels/params.h: maxDims outer
	// dimensions plus one from splitting runs to a common length.
	kernelDims = maxDims + 1
)

// widths are the kernels' element sizes, widest first (m2n_copy16 ...).
var widths = [...]int{16, 8, 4, 2, 1}

// planSide addresses one side's rows: row r starts at base + sum idx[i] *
// stride[i], idx being r in the mixed radix count, outermost first.
type planSide struct {
	base   uint64
	count  []uint64
	stride []uint64
}

// copyPlan is everything a launch needs but the grid size.
type copyPlan struct {
	width        int // element size in bytes: which kernel
	src, dst     planSide
	rows         uint64 // rows on each side, all of runElems elements
	runElems     uint64
	chunkElems   uint64
	chunksPerRow uint64
	items        uint64 // rows * chunksPerRow; 0 for an empty copy
	teamShift    uint
}

// grid returns the number of blocks to launch, given how many fit on the
// device at once. Rows split into chunks (longer than chunkElems elements)
// get a block for every team's item, capped at maxGridBlocks; shorter rows
// get at most the resident blocks, which loop over the items. Measured on an
// H200 (1 GiB, source pitch twice the row): 64 KiB rows reach 96% of a plain
// copy with a block per item against 88% with resident blocks, while 256 B
// and 4 KiB rows reach 87-88% with resident blocks against 81-83% with a
// block per item.
func (p *copyPlan) grid(resident int) int {
	limit := resident
	if p.chunksPerRow > 1 {
		limit = maxGridBlocks
	}
	return clampGrid(p.blocksNeeded(), limit)
}

// blocksNeeded is the number of blocks that gives every team one item.
func (p *copyPlan) blocksNeeded() uint64 {
	teams := uint64(blockThreads >> p.teamShift)
	return (p.items + teams - 1) / teams
}

// clampGrid returns need limited to [1, limit].
func clampGrid(need uint64, limit int) int {
	limit = max(limit, 1)
	if need < uint64(limit) {
		return max(int(need), 1)
	}
	return limit
}

// planCopy plans copying the bytes srcDesc describes at src to the places
// dstDesc describes at dst, in packed order. The descriptors must describe
// the same number of bytes and the destination's runs must be disjoint. An
// empty copy gives a plan with items == 0.
func planCopy(dst DevicePtr, dstDesc strided.Desc, src DevicePtr, srcDesc strided.Desc) (copyPlan, error) {
	if err := checkDesc(srcDesc); err != nil {
		return copyPlan{}, fmt.Errorf("source: %w", err)
	}
	if err := checkDesc(dstDesc); err != nil {
		return copyPlan{}, fmt.Errorf("destination: %w", err)
	}
	if dstDesc.Bytes() != srcDesc.Bytes() {
		return copyPlan{}, fmt.Errorf("%w: destination describes %d bytes, source %d",
			strided.ErrInvalid, dstDesc.Bytes(), srcDesc.Bytes())
	}
	if err := dstDesc.CheckDisjoint(); err != nil {
		return copyPlan{}, err
	}
	total := uint64(srcDesc.Bytes())
	if total == 0 {
		return copyPlan{}, nil
	}
	sRun, sDims := normalize(srcDesc)
	dRun, dDims := normalize(dstDesc)
	// Split both sides' runs to their greatest common length, so that row r
	// is the same bytes on both sides.
	run := gcd(sRun, dRun)
	sDims = splitRun(sDims, sRun, run)
	dDims = splitRun(dDims, dRun, run)

	p := copyPlan{
		src:  planSide{base: uint64(src) + uint64(srcDesc.Offset)},
		dst:  planSide{base: uint64(dst) + uint64(dstDesc.Offset)},
		rows: total / run,
	}
	for _, d := range sDims {
		p.src.count = append(p.src.count, d.count)
		p.src.stride = append(p.src.stride, d.stride)
	}
	for _, d := range dDims {
		p.dst.count = append(p.dst.count, d.count)
		p.dst.stride = append(p.dst.stride, d.stride)
	}
	if rowsOf(p.src) != p.rows || rowsOf(p.dst) != p.rows || len(p.src.count) > kernelDims || len(p.dst.count) > kernelDims {
		panic(fmt.Sprintf("cuda: planCopy: inconsistent plan %+v for %+v <- %+v", p, dstDesc, srcDesc))
	}

	p.width = 1
	for _, w := range widths {
		if aligned(uint64(w), p.src, p.dst, run) {
			p.width = w
			break
		}
	}
	p.runElems = run / uint64(p.width)
	for p.teamShift < maxTeamShift && uint64(1)<<p.teamShift < p.runElems {
		p.teamShift++
	}
	p.chunkElems = min(p.runElems, chunkElems)
	p.chunksPerRow = (p.runElems + p.chunkElems - 1) / p.chunkElems
	p.items = p.rows * p.chunksPerRow
	return p, nil
}

type dim struct{ count, stride uint64 }

// normalize returns a descriptor's run and outer dimensions with the
// dimensions of count 1 dropped and every dimension merged into the one
// inside it (or into the run) where the two are contiguous. The descriptor
// must be valid and non-empty.
func normalize(d strided.Desc) (run uint64, dims []dim) {
	run = uint64(d.Run)
	// Walk from the innermost dimension out; dims is built innermost first.
	for i := len(d.Count) - 1; i >= 0; i-- {
		c, s := uint64(d.Count[i]), uint64(d.Stride[i])
		switch {
		case c == 1:
		case len(dims) == 0 && s == run:
			run *= c
		case len(dims) > 0 && s == dims[len(dims)-1].count*dims[len(dims)-1].stride:
			dims[len(dims)-1].count *= c
		default:
			dims = append(dims, dim{c, s})
		}
	}
	// Outermost first, as the kernel wants.
	for i, j := 0, len(dims)-1; i < j; i, j = i+1, j-1 {
		dims[i], dims[j] = dims[j], dims[i]
	}
	return run, dims
}

// splitRun rewrites runs of length run as run/to runs of length to, adding
// an innermost dimension.
func splitRun(dims []dim, run, to uint64) []dim {
	if run == to {
		return dims
	}
	return append(dims, dim{run / to, to})
}

func rowsOf(s planSide) uint64 {
	n := uint64(1)
	for _, c := range s.count {
		n *= c
	}
	return n
}

// aligned reports whether elements of w bytes can do the copy: both bases,
// the run and every stride are multiples of w.
func aligned(w uint64, src, dst planSide, run uint64) bool {
	if src.base%w != 0 || dst.base%w != 0 || run%w != 0 {
		return false
	}
	for _, s := range [][]uint64{src.stride, dst.stride} {
		for _, x := range s {
			if x%w != 0 {
				return false
			}
		}
	}
	return true
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
