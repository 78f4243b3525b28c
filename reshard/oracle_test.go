package reshard

import (
	"fmt"
	"math/rand/v2"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// elemValue is the content of byte k of global element idx: every byte of
// every element differs, so a misplaced byte cannot go unnoticed.
func elemValue(idx int64, k int) byte {
	x := uint64(idx)*0x9E3779B97F4A7C15 + uint64(k)*0xBF58476D1CE4E5B9
	x ^= x >> 31
	return byte(x ^ x>>17)
}

// fillLocal fills a local buffer of layout l held at box b with elemValue.
func fillLocal(l placement.Layout, b placement.Box) []byte {
	elem := int(l.ElemSize())
	buf := make([]byte, b.Elems()*int64(elem))
	forEachIndex(b, func(i int64, idx []int64) {
		g := globalIndex(l.Shape(), idx)
		for k := 0; k < elem; k++ {
			buf[i*int64(elem)+int64(k)] = elemValue(g, k)
		}
	})
	return buf
}

// forEachIndex calls fn for every global index in b, in row-major order,
// with the index's position i inside the box.
func forEachIndex(b placement.Box, fn func(i int64, idx []int64)) {
	if b.Empty() {
		return
	}
	idx := append([]int64(nil), b.Lo...)
	for i := int64(0); ; i++ {
		fn(i, idx)
		if !b.Next(idx) {
			return
		}
	}
}

func globalIndex(shape, idx []int64) int64 {
	g := int64(0)
	for d := range shape {
		g = g*shape[d] + idx[d]
	}
	return g
}

// checkPlan is the slow oracle: it moves real bytes through every transfer
// of the plan, one run at a time, and then checks element by element that
// every destination holds exactly the expected bytes, that every destination
// element was written exactly once, and that every transfer's source holds
// its box.
func checkPlan(p *Plan) error {
	src, dst := p.Src(), p.Dst()
	elem := dst.ElemSize()
	srcBufs := map[int][]byte{}
	for i := 0; i < src.Mesh().Size(); i++ {
		r := src.Mesh().RankAt(i)
		b, _ := src.RankBox(r)
		srcBufs[r] = fillLocal(src, b)
	}
	dstBufs := map[int][]byte{}
	writes := map[int][]int32{}
	for i := 0; i < dst.Mesh().Size(); i++ {
		r := dst.Mesh().RankAt(i)
		b, _ := dst.RankBox(r)
		dstBufs[r] = make([]byte, b.Elems()*elem)
		for j := range dstBufs[r] {
			dstBufs[r][j] = 0xA5
		}
		writes[r] = make([]int32, b.Elems())
	}
	for i := 0; i < p.Len(); i++ {
		t := p.Transfer(i)
		sb, ok := src.RankBox(t.Src)
		if !ok {
			return fmt.Errorf("transfer %d: source %d is not in the source mesh", i, t.Src)
		}
		for d := range t.Box.Lo {
			if t.Box.Lo[d] < sb.Lo[d] || t.Box.Hi[d] > sb.Hi[d] || t.Box.Hi[d] <= t.Box.Lo[d] {
				return fmt.Errorf("transfer %d: box %v not inside source %d's box %v", i, t.Box, t.Src, sb)
			}
		}
		if t.SrcAt.Bytes() != t.DstAt.Bytes() || t.bytes() != t.Box.Elems()*elem {
			return fmt.Errorf("transfer %d: %d source bytes, %d destination bytes, box of %d elements",
				i, t.SrcAt.Bytes(), t.DstAt.Bytes(), t.Box.Elems())
		}
		packed := make([]byte, 0, t.bytes())
		sbuf := srcBufs[t.Src]
		var bad error
		t.SrcAt.ForEachRun(func(off int64) {
			if off < 0 || off+t.SrcAt.Run > int64(len(sbuf)) {
				bad = fmt.Errorf("transfer %d: source run at %d+%d outside a buffer of %d", i, off, t.SrcAt.Run, len(sbuf))
				return
			}
			packed = append(packed, sbuf[off:off+t.SrcAt.Run]...)
		})
		if bad != nil {
			return bad
		}
		dbuf := dstBufs[t.Dst]
		pos := int64(0)
		t.DstAt.ForEachRun(func(off int64) {
			if off < 0 || off+t.DstAt.Run > int64(len(dbuf)) {
				bad = fmt.Errorf("transfer %d: destination run at %d+%d outside a buffer of %d", i, off, t.DstAt.Run, len(dbuf))
				return
			}
			copy(dbuf[off:off+t.DstAt.Run], packed[pos:pos+t.DstAt.Run])
			for e := off / elem; e < (off+t.DstAt.Run)/elem; e++ {
				writes[t.Dst][e]++
			}
			pos += t.DstAt.Run
		})
		if bad != nil {
			return bad
		}
	}
	for i := 0; i < dst.Mesh().Size(); i++ {
		r := dst.Mesh().RankAt(i)
		b, _ := dst.RankBox(r)
		want := fillLocal(dst, b)
		got := dstBufs[r]
		for e, n := range writes[r] {
			if n != 1 {
				return fmt.Errorf("destination %d element %d (box %v) written %d times, want once", r, e, b, n)
			}
		}
		for j := range want {
			if got[j] != want[j] {
				return fmt.Errorf("destination %d byte %d: got %#x, want %#x", r, j, got[j], want[j])
			}
		}
	}
	return nil
}

// randomLayout draws a layout over the given ranks with a random mesh shape
// whose size is len(ranks).
func randomLayout(rng *rand.Rand, shape []int64, dt dtype.DType, ranks []int) placement.Layout {
	n := len(ranks)
	var mshape []int
	for n > 1 && len(mshape) < 3 {
		f := divisors(n)[rng.IntN(len(divisors(n)))]
		if len(mshape) == 2 {
			f = n
		}
		mshape = append(mshape, f)
		n /= f
	}
	if len(mshape) == 0 || rng.IntN(6) == 0 {
		mshape = append(mshape, 1)
	}
	rng.Shuffle(len(mshape), func(i, j int) { mshape[i], mshape[j] = mshape[j], mshape[i] })
	m, err := mesh.New(mshape, ranks)
	if err != nil {
		panic(err)
	}
	ps := make([]placement.Placement, len(mshape))
	for a := range ps {
		if len(shape) > 0 && rng.IntN(3) != 0 {
			ps[a] = placement.Shard(rng.IntN(len(shape)))
		}
	}
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		panic(err)
	}
	return l
}

func divisors(n int) []int {
	var out []int
	for f := 1; f <= n; f++ {
		if n%f == 0 {
			out = append(out, f)
		}
	}
	return out
}

// randomPair draws a source and destination layout of one random tensor,
// with disjoint, overlapping or permuted rank sets, and the world size.
func randomPair(rng *rand.Rand) (src, dst placement.Layout, world int) {
	nd := rng.IntN(5) // 0..4 dims
	shape := make([]int64, nd)
	for d := range shape {
		switch rng.IntN(10) {
		case 0:
			shape[d] = 0
		case 1:
			shape[d] = 1 + rng.Int64N(40)
		default:
			shape[d] = 1 + rng.Int64N(9)
		}
	}
	// every dtype, in placement's order (the planner sees only their sizes)
	dts := []dtype.DType{dtype.BF16, dtype.F16, dtype.F32, dtype.F64, dtype.I8,
		dtype.U8, dtype.I32, dtype.I64, dtype.FP8E4M3, dtype.FP8E5M2}
	dt := dts[rng.IntN(len(dts))]
	m, n := 1+rng.IntN(8), 1+rng.IntN(8)
	var srcRanks, dstRanks []int
	switch rng.IntN(4) {
	case 0: // the paper's case: [0,M) then [M, M+N)
		srcRanks, dstRanks = seq(0, m), seq(m, n)
		world = m + n
	case 1: // overlapping: destination ranks start inside the source mesh
		start := rng.IntN(m + 1)
		srcRanks, dstRanks = seq(0, m), seq(start, n)
		world = max(m, start+n)
	default: // both drawn from a shuffled pool, with idle ranks
		world = m + n + rng.IntN(3)
		pool := rng.Perm(world)
		srcRanks = pool[:m]
		if rng.IntN(2) == 0 {
			dstRanks = pool[m : m+n]
		} else {
			pool2 := rng.Perm(world)
			dstRanks = pool2[:n]
		}
	}
	return randomLayout(rng, shape, dt, srcRanks), randomLayout(rng, shape, dt, dstRanks), world
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}
