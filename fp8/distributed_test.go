package fp8_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/fp8/fp8test"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestDistributedPlans quantizes through real reshard plans, as the
// executor will: every source rank gathers the partial amaxes of its local
// part, the partial amaxes are combined, every transfer is packed from the
// source's local buffer (its SrcAt descriptor) straight into FP8, unpacked
// at the destination (1-byte descriptors of the same box), and every
// destination fills its local scale tensor from the global scales. Each
// destination's bytes and scales must equal those of quantizing the whole
// tensor at once, for every 2-D and 3-D pair of the reshard conformance
// pairs file and for pairs whose shard boundaries cut 128x128 blocks, in
// every mode, from bf16 and f32.
func TestDistributedPlans(t *testing.T) {
	pairs, err := transporttest.DefaultPairs()
	if err != nil {
		t.Fatal(err)
	}
	pairs = slices.DeleteFunc(pairs, func(p transporttest.Pair) bool {
		s, err := placement.ParseShape(p.Shape)
		return err != nil || len(s) < 2 || len(s) > 3
	})
	if len(pairs) < 5 {
		t.Fatalf("only %d 2-D and 3-D pairs in the pairs file", len(pairs))
	}
	// Shard boundaries that cut blocks, in both directions and both dims,
	// with replication and uneven chunks.
	for i, p := range [][5]string{
		{"300x200", "3", "S0", "2x2", "R,S1"},
		{"300x200", "2x2", "S1,S0", "3", "S1"},
		{"260x390", "4", "S1", "2x3", "S0,S1"},
		{"4x256x384", "2", "S0", "3", "S1"},
		{"4x256x384", "2x2", "S0,S2", "2x3", "S1,S2"},
		{"3x130x257", "3", "S2", "2x2", "S1,S0"},
		{"129x129", "2x2", "S0,S1", "2x2", "S1,S0"},
		{"520x300", "5", "S0", "1", "R"},
	} {
		pairs = append(pairs, transporttest.Pair{Line: 1000 + i, Shape: p[0], DType: "bf16", SrcMesh: p[1], SrcPl: p[2], DstMesh: p[3], DstPl: p[4]})
	}
	cases, err := transporttest.Cases(pairs)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	n := 0
	for _, c := range cases {
		for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
			src, err := withDType(c.Src, dt)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := withDType(c.Dst, dt)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor} {
				if err := quantizeThroughPlan(r, src, dst, mode); err != nil {
					t.Errorf("%v, %v, %v: %v", c, dt, mode, err)
				}
				n++
			}
		}
	}
	t.Logf("%d distributed quantizations equal the whole tensor's", n)
}

func withDType(l placement.Layout, dt dtype.DType) (placement.Layout, error) {
	return placement.NewLayout(l.Shape(), dt, l.Mesh(), l.Placements())
}

// quantizeThroughPlan runs one distributed quantization and compares it
// with Quantize.
func quantizeThroughPlan(r *rand.Rand, src, dst placement.Layout, mode fp8.Mode) error {
	world := 0
	for _, m := range []mesh.Mesh{src.Mesh(), dst.Mesh()} {
		for i := range m.Size() {
			world = max(world, m.RankAt(i)+1)
		}
	}
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{StripeReplicas: r.IntN(2) == 0})
	if err != nil {
		return err
	}
	shape := src.Shape()
	dt := src.DType()
	esz := int64(dt.Size())
	whole := fp8test.Random(r, dt, shape, spread)
	want, err := fp8.Quantize(dt, shape, mode, whole)
	if err != nil {
		return err
	}
	g := want.Grid

	// Source ranks: local parts, partial amaxes.
	type source struct {
		data   []byte
		box    placement.Box
		scales fp8.Window
	}
	sources := map[int]*source{}
	global, err := g.NewWindow(g.All())
	if err != nil {
		return err
	}
	for i := range src.Mesh().Size() {
		rank := src.Mesh().RankAt(i)
		box, _ := src.RankBox(rank)
		s := &source{data: extract(whole, shape, box, esz), box: box}
		w, err := g.WindowFor(box)
		if err != nil {
			return err
		}
		if err := g.Amax(w, fp8.Dense(dt, s.data, box)); err != nil {
			return err
		}
		// The exchange: owners combine partial amaxes with max.
		if err := global.MaxWith(w); err != nil {
			return err
		}
		s.scales = w
		sources[rank] = s
	}
	if err := global.ToScales(); err != nil {
		return err
	}
	for _, s := range sources {
		if err := s.scales.CopyFrom(global); err != nil {
			return err
		}
	}

	// Transfers: quantize while packing, unpack FP8 bytes.
	dstData := map[int][]byte{}
	for i := range dst.Mesh().Size() {
		rank := dst.Mesh().RankAt(i)
		box, _ := dst.RankBox(rank)
		dstData[rank] = bytes.Repeat([]byte{0x7F}, int(box.Elems())) // poison: NaN
	}
	var mem transport.HostMemory
	for i := range plan.Len() {
		tr := plan.Transfer(i)
		s := sources[tr.Src]
		staging := make([]byte, tr.Box.Elems())
		reg := fp8.Region{DType: dt, Data: s.data, At: tr.SrcAt, Box: tr.Box}
		if err := g.Pack(staging, reg, s.scales); err != nil {
			return fmt.Errorf("transfer %d -> %d of %v: %w", tr.Src, tr.Dst, tr.Box, err)
		}
		at := strided.Describe(tr.DstLocal, tr.Box, 1)
		if err := mem.Unpack(transport.HostBuffer(dstData[tr.Dst]), at, transport.HostBuffer(staging), 0); err != nil {
			return err
		}
	}

	// Destinations: bytes and local scale tensors.
	for rank, got := range dstData {
		box, _ := dst.RankBox(rank)
		if w := extract(want.Data, shape, box, 1); !bytes.Equal(got, w) {
			i := firstDiff(got, w)
			return fmt.Errorf("destination rank %d (box %v): byte %d is %#02x, whole tensor %#02x", rank, box, i, at(got, i), at(w, i))
		}
		local, err := g.WindowFor(box)
		if err != nil {
			return err
		}
		if err := local.CopyFrom(global); err != nil {
			return err
		}
		wantScales := extractF32(want.Scales, g.ScaleShape(), local.Blocks)
		if !slices.Equal(local.Values, wantScales) {
			return fmt.Errorf("destination rank %d (box %v, blocks %v): scales %v, whole tensor %v", rank, box, local.Blocks, local.Values, wantScales)
		}
	}
	return nil
}

// spread is how the random tensors' values vary: a different magnitude
// per region, so that blocks get different scales.
var spread = fp8test.Spread{Exp: 20, Period: 97, Levels: 7}

// extract returns box's elements of a dense row-major tensor, dense.
func extract(data []byte, shape []int64, box placement.Box, esz int64) []byte {
	full := placement.Box{Lo: make([]int64, len(shape)), Hi: shape}
	if box.Empty() {
		return []byte{}
	}
	at := strided.Describe(full, box, esz)
	out := make([]byte, box.Elems()*esz)
	if err := (transport.HostMemory{}).Pack(transport.HostBuffer(out), 0, transport.HostBuffer(data), at); err != nil {
		panic(err)
	}
	return out
}

func extractF32(v []float32, shape []int64, box placement.Box) []float32 {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return decodeF32(extract(raw, shape, box, 4))
}
