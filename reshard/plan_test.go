package reshard

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/layouttest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// layout builds a layout from the CLI spellings, failing the test on error.
func layout(t testing.TB, shape, dtype, meshShape, placements string, ranks []int) placement.Layout {
	t.Helper()
	ms := layouttest.MeshShape(t, meshShape)
	var m mesh.Mesh
	if ranks == nil {
		m = layouttest.Interval(t, ms, 0)
	} else {
		m = layouttest.Ranks(t, ms, ranks)
	}
	return layouttest.Layout(t, shape, layouttest.DType(t, dtype), m, placements)
}

func TestPlanCases(t *testing.T) {
	tests := []struct {
		name           string
		shape, dtype   string
		srcMesh, srcPl string
		srcRanks       []int
		dstMesh, dstPl string
		dstRanks       []int
		world          int
		opts           Options
		transfers      int
		sent           map[int]int64 // bytes sent per rank, where checked
		localCopies    int
	}{
		{name: "paper example A: S0 to DP2xTP2 [R,S0]", shape: "8x4", dtype: "f32",
			srcMesh: "4", srcPl: "S0", dstMesh: "2x2", dstPl: "R,S0", dstRanks: seq(4, 4), world: 8,
			transfers: 8, sent: map[int]int64{0: 64, 1: 64, 2: 64, 3: 64}},
		{name: "identity layout on the same ranks copies locally", shape: "6x6", dtype: "bf16",
			srcMesh: "3", srcPl: "S0", dstMesh: "3", dstPl: "S0", world: 3,
			transfers: 3, localCopies: 3},
		{name: "uneven torch.chunk splits 10 over 4 to 3", shape: "10", dtype: "f32",
			srcMesh: "4", srcPl: "S0", dstMesh: "3", dstPl: "S0", dstRanks: seq(4, 3), world: 7,
			// source parts 3,3,3,1; destination parts 4,4,2
			transfers: 6},
		{name: "more ranks than rows leaves empty shards", shape: "2", dtype: "f32",
			srcMesh: "8", srcPl: "S0", dstMesh: "8", dstPl: "S0", dstRanks: seq(8, 8), world: 16,
			transfers: 2},
		{name: "empty tensor moves nothing", shape: "0x4", dtype: "f32",
			srcMesh: "4", srcPl: "S0", dstMesh: "2", dstPl: "S1", dstRanks: seq(4, 2), world: 6,
			transfers: 0},
		{name: "scalar goes to every destination", shape: "scalar", dtype: "f64",
			srcMesh: "2", srcPl: "R", dstMesh: "3", dstPl: "R", dstRanks: seq(2, 3), world: 5,
			transfers: 3, sent: map[int]int64{0: 24, 1: 0}},
		{name: "replicated source has one owner", shape: "6x3", dtype: "f32",
			srcMesh: "2", srcPl: "R", dstMesh: "3", dstPl: "S0", dstRanks: seq(2, 3), world: 5,
			transfers: 3, sent: map[int]int64{0: 72, 1: 0}},
		{name: "striping spreads a replicated source", shape: "6x3", dtype: "f32",
			srcMesh: "2", srcPl: "R", dstMesh: "3", dstPl: "S0", dstRanks: seq(2, 3), world: 5,
			opts: Options{StripeReplicas: true}, transfers: 3, sent: map[int]int64{0: 48, 1: 24}},
		{name: "replicated source 4 over 3 leaves an empty destination", shape: "4x3", dtype: "f32",
			srcMesh: "2", srcPl: "R", dstMesh: "3", dstPl: "S0", dstRanks: seq(2, 3), world: 5,
			transfers: 2},
		{name: "nested sharding of one dim", shape: "5", dtype: "f32",
			srcMesh: "2x2", srcPl: "S0,S0", dstMesh: "4", dstPl: "S0", dstRanks: seq(4, 4), world: 8,
			// source 2,1,1,1 at 0,2,3,4; destination 2,2,1,0
			transfers: 4},
		{name: "explicit permuted ranks", shape: "8x8", dtype: "i32",
			srcMesh: "2x2", srcPl: "S0,S1", srcRanks: []int{7, 2, 5, 0},
			dstMesh: "4", dstPl: "S1", dstRanks: []int{1, 6, 3, 4}, world: 8,
			transfers: 8},
		{name: "3-D mesh reverses shard dims", shape: "8x8x8", dtype: "f32",
			srcMesh: "2x2x2", srcPl: "S0,S1,S2", dstMesh: "2x2x2", dstPl: "S2,S1,S0", dstRanks: seq(8, 8), world: 16,
			// the same eight 4x4x4 blocks, held by other coordinates
			transfers: 8},
		{name: "3-D mesh changes block shape", shape: "8x8x8", dtype: "f32",
			srcMesh: "2x2x2", srcPl: "S0,S1,S2", dstMesh: "2x4", dstPl: "S2,S0", dstRanks: seq(8, 8), world: 16,
			// each destination 2x8x4 block meets 2 source blocks along dim 1
			transfers: 16},
		{name: "overlapping meshes mix local copies and sends", shape: "8", dtype: "u8",
			srcMesh: "4", srcPl: "S0", dstMesh: "4", dstPl: "S0", dstRanks: []int{2, 1, 0, 3}, world: 4,
			transfers: 4, localCopies: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := layout(t, tc.shape, tc.dtype, tc.srcMesh, tc.srcPl, tc.srcRanks)
			dst := layout(t, tc.shape, tc.dtype, tc.dstMesh, tc.dstPl, tc.dstRanks)
			p, err := NewPlan(src, dst, tc.world, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Len() != tc.transfers {
				t.Errorf("%d transfers, want %d", p.Len(), tc.transfers)
			}
			sent, _ := p.rankBytes()
			for r, want := range tc.sent {
				if sent[r] != want {
					t.Errorf("rank %d sends %d bytes, want %d", r, sent[r], want)
				}
			}
			local := 0
			for _, tr := range p.transfers() {
				if tr.Src == tr.Dst {
					local++
				}
			}
			if local != tc.localCopies {
				t.Errorf("%d local copies, want %d", local, tc.localCopies)
			}
			if err := checkPlan(p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPlanOracle checks thousands of random layout pairs against the
// element-by-element oracle: uneven and empty shards, 0-4 dim tensors, 1-3
// axis meshes, nested sharding, permuted, overlapping and disjoint ranks.
func TestPlanOracle(t *testing.T) {
	n := 4000
	if testing.Short() {
		n = 500
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		src, dst, world := randomPair(rng)
		opts := Options{StripeReplicas: rng.IntN(2) == 0}
		p, err := NewPlan(src, dst, world, opts)
		if err != nil {
			t.Fatalf("pair %d: %v -> %v: %v", i, src, dst, err)
		}
		if err := checkPlan(p); err != nil {
			t.Fatalf("pair %d: %v -> %v (world %d, %+v): %v", i, src, dst, world, opts, err)
		}
	}
}

// TestPlanDeterministic derives every plan twice and compares the results
// and the indexes.
func TestPlanDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		src, dst, world := randomPair(rng)
		a, err := NewPlan(src, dst, world, Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewPlan(src, dst, world, Options{})
		if a.Fingerprint() != b.Fingerprint() || a.Len() != b.Len() {
			t.Fatalf("pair %d: plans differ", i)
		}
		for j := 0; j < a.Len(); j++ {
			x, y := a.Transfer(j), b.Transfer(j)
			if x.Src != y.Src || x.Dst != y.Dst || !x.Box.Equal(y.Box) || x.SrcAt.String() != y.SrcAt.String() {
				t.Fatalf("pair %d transfer %d differs: %+v vs %+v", i, j, x, y)
			}
		}
		// the per-rank indexes list every transfer once, in plan order.
		seenSend, seenRecv := 0, 0
		for r := 0; r < world; r++ {
			sends := a.sends(r)
			if !slices.IsSorted(sends) {
				t.Fatalf("pair %d: sends of rank %d not in plan order", i, r)
			}
			for _, k := range sends {
				if a.Transfer(int(k)).Src != r {
					t.Fatalf("pair %d: Sends(%d) lists transfer %d from %d", i, r, k, a.Transfer(int(k)).Src)
				}
			}
			for _, k := range a.Recvs(r) {
				if a.Transfer(int(k)).Dst != r {
					t.Fatalf("pair %d: Recvs(%d) lists transfer %d to %d", i, r, k, a.Transfer(int(k)).Dst)
				}
			}
			seenSend += len(sends)
			seenRecv += len(a.Recvs(r))
		}
		if seenSend != a.Len() || seenRecv != a.Len() {
			t.Fatalf("pair %d: indexes list %d sends and %d receives of %d transfers", i, seenSend, seenRecv, a.Len())
		}
	}
}

func TestFingerprintSeesEveryInput(t *testing.T) {
	base := func() (placement.Layout, placement.Layout) {
		return layout(t, "8x4", "f32", "4", "S0", nil), layout(t, "8x4", "f32", "2x2", "R,S0", seq(4, 4))
	}
	src, dst := base()
	ref, err := NewPlan(src, dst, 8, Options{})
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]func() (*Plan, error){
		"world":   func() (*Plan, error) { return NewPlan(src, dst, 9, Options{}) },
		"options": func() (*Plan, error) { return NewPlan(src, dst, 8, Options{StripeReplicas: true}) },
		"dst place": func() (*Plan, error) {
			return NewPlan(src, layout(t, "8x4", "f32", "2x2", "R,S1", seq(4, 4)), 8, Options{})
		},
		"dst ranks": func() (*Plan, error) {
			return NewPlan(src, layout(t, "8x4", "f32", "2x2", "R,S0", []int{4, 5, 7, 6}), 8, Options{})
		},
		"dst mesh": func() (*Plan, error) {
			return NewPlan(src, layout(t, "8x4", "f32", "4", "S0", seq(4, 4)), 8, Options{})
		},
		"dtype": func() (*Plan, error) {
			return NewPlan(layout(t, "8x4", "i32", "4", "S0", nil), layout(t, "8x4", "i32", "2x2", "R,S0", seq(4, 4)), 8, Options{})
		},
		"shape": func() (*Plan, error) {
			return NewPlan(layout(t, "8x5", "f32", "4", "S0", nil), layout(t, "8x5", "f32", "2x2", "R,S0", seq(4, 4)), 8, Options{})
		},
		"src ranks": func() (*Plan, error) {
			return NewPlan(layout(t, "8x4", "f32", "4", "S0", []int{3, 2, 1, 0}), dst, 8, Options{})
		},
	}
	for name, mk := range variants {
		p, err := mk()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Fingerprint() == ref.Fingerprint() {
			t.Errorf("changing the %s leaves the fingerprint %#x unchanged", name, ref.Fingerprint())
		}
	}
}

func TestPlanRejects(t *testing.T) {
	tests := []struct {
		name     string
		src, dst placement.Layout
		world    int
		want     string
	}{
		{"shape differs", layout(t, "8x4", "f32", "4", "S0", nil), layout(t, "8x5", "f32", "2", "S0", seq(4, 2)), 6,
			"shape 8x5, want 8x4: source and destination global shapes differ"},
		{"dtype differs", layout(t, "8", "f32", "4", "S0", nil), layout(t, "8", "bf16", "2", "S0", seq(4, 2)), 6,
			"dtype bf16, want f32: source and destination dtypes differ, and the only conversion in flight is bf16 or f32 to fp8e4m3"},
		{"fp8 from f16", layout(t, "8x4", "f16", "4", "S0", nil), layout(t, "8x4", "fp8e4m3", "2", "S0", seq(4, 2)), 6,
			"dtype fp8e4m3, want f16: source and destination dtypes differ, and the only conversion in flight is bf16 or f32 to fp8e4m3"},
		{"destination mesh outside the communicator", layout(t, "8", "f32", "4", "S0", nil), layout(t, "8", "f32", "2", "S0", seq(4, 2)), 5,
			"destination mesh 2[4,5]: mesh 2[4,5] reaches rank 5, outside a communicator of 5 ranks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPlan(tc.src, tc.dst, tc.world, Options{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPlanEndsAndSameRegion checks Ends and SameRegion against the
// materialized transfers (Transfer's Src, Dst, DstShard, Box and SrcLocal)
// on random layout pairs, every pair of transfers of a plan (up to a
// limit) for SameRegion.
func TestPlanEndsAndSameRegion(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	same := 0
	for i := 0; i < 600; i++ {
		src, dst, world := randomPair(rng)
		p, err := NewPlan(src, dst, world, Options{StripeReplicas: rng.IntN(2) == 0})
		if err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		n := min(p.Len(), 60)
		ts := make([]Transfer, n)
		for a := range ts {
			ts[a] = p.Transfer(a)
			s, d, sh := p.Ends(a)
			if s != ts[a].Src || d != ts[a].Dst || sh != ts[a].DstShard {
				t.Fatalf("pair %d, transfer %d: Ends %d %d %d, Transfer %d %d %d", i, a, s, d, sh, ts[a].Src, ts[a].Dst, ts[a].DstShard)
			}
		}
		for a := range ts {
			for b := range ts {
				want := ts[a].Box.Equal(ts[b].Box) && ts[a].SrcLocal.Equal(ts[b].SrcLocal)
				if got := p.SameRegion(a, b); got != want {
					t.Fatalf("pair %d: SameRegion(%d, %d) = %v, want %v (%v %v, %v %v)", i, a, b, got, want, ts[a].Box, ts[a].SrcLocal, ts[b].Box, ts[b].SrcLocal)
				}
				if want && a != b {
					same++
				}
			}
		}
	}
	if same == 0 {
		t.Fatal("no two transfers shared a region: the test checks nothing")
	}
}
