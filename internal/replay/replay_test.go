package replay_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/internal/replay/replaytest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// variant is one way of running every case.
type variant struct {
	route    reshard.Route
	domains  int
	padded   bool
	coalesce int64
	runs     int
	memcpy   int64
	chunk    int64 // the schedule's ChunkBytes where not 0 (else 4 KiB)
}

const colocatedPairs = `
8x4 | f32 | 1 | S0 | 1 | S0
8x4 | f32 | 1 | S0 | 2 | S0
7x5 | bf16 | 2 | S0 | 2 | S1
16x8 | f32 | 2 | R | 2 | S0
8x8x8 | f32 | 1x2 | S0,S1 | 2x1 | S2,R
`

var variants = []variant{
	{route: reshard.Flat, domains: 1},
	{route: reshard.AllGatherBroadcast, domains: 1},
	{route: reshard.AllGatherBroadcast, domains: 1, runs: 2},
	{route: hier.Hier{}, domains: 1},
	{route: hier.Hier{}, domains: 2, runs: 2},
	{route: reshard.Flat, domains: 1, padded: true, coalesce: 1 << 10},
	{route: hier.Hier{}, domains: 2, padded: true, coalesce: 1 << 10, memcpy: 64},
	{route: reshard.AllGatherBroadcast, domains: 2, memcpy: 64},
}

// TestSimulatedConformance runs every conformance case of at least 2 ranks
// on every route through replay plans, all ranks simulated together in a
// random interleaving of their streams, and checks every element: the
// events of a plan alone must order it.
func TestSimulatedConformance(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	// colocated: every rank holds both sides, as on the GPUs of one host;
	// one source rank makes agbcast copy into its scratch and out of it in
	// one round (copies that depend on copies).
	extra, err := transporttest.ParsePairs(strings.NewReader(colocatedPairs), "colocated pairs")
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := transporttest.DefaultPairs()
	if err != nil {
		t.Fatal(err)
	}
	colocated, err := transporttest.ColocatedCases(append(pairs, extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, colocated...)
	seeds := 2
	if testing.Short() {
		seeds = 1
	}
	runs := 0
	for ci, c := range cases {
		for vi, v := range variants {
			topo := replaytest.DomainTopology(t, c, v.domains)
			for seed := range seeds {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(vi*10+seed)))
				env := replaytest.Env{Topo: topo, Opts: reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 32 << 10},
					Coalesce: v.coalesce, Padded: v.padded, Runs: v.runs, MemcpyMin: v.memcpy}
				if err := replaytest.RunCase(&replaytest.GoHeap{}, env, c, v.route, r); err != nil {
					t.Fatalf("%v, %s over %d domains (views %v, coalesce %d, runs %d, seed %d): %v",
						c, v.route.Name(), v.domains, v.padded, v.coalesce, v.runs, seed, err)
				}
				runs++
			}
		}
	}
	t.Logf("%d simulated reshards checked element by element", runs)
}

// TestNoMergeAcrossBuffers: the local copies of two tensors whose buffers
// happen to lie back to back in memory stay two items (and a memcpy never
// spans two allocations, which the driver refuses), while one tensor's
// contiguous pieces in one buffer still merge.
func TestNoMergeAcrossBuffers(t *testing.T) {
	m, _ := mesh.Interval([]int{1}, 0)
	l, err := placement.ParseLayout("1024x1024", dtype.BF16, m, "R")
	if err != nil {
		t.Fatal(err)
	}
	var plans []*reshard.Plan
	for range 2 {
		p, err := reshard.NewPlan(l, l, 1, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	s, err := reshard.Flat.Schedule(plans, reshard.Topology{}, reshard.ScheduleOptions{ChunkBytes: 256 << 10, StagingBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(s, 0, program.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := l.Bytes()
	// source buffers at 0 and n, destination buffers at 2n and 3n: each
	// pair adjacent.
	b := replay.Buffers{Tensors: [][2]replay.Span{{{Addr: 1 << 32, Len: n}, {Addr: 1<<32 + 2*uint64(n), Len: n}},
		{{Addr: 1<<32 + uint64(n), Len: n}, {Addr: 1<<32 + 3*uint64(n), Len: n}}}, Full: make([]replay.Span, 2)}
	pl, err := replay.Build(prog, b, replay.Options{MemcpyMin: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	memcpys := 0
	for _, c := range pl.Cmds {
		if c.Kind == replay.Memcpy {
			memcpys++
			if c.Len != n {
				t.Errorf("a memcpy of %d bytes, want one per tensor of %d", c.Len, n)
			}
		}
	}
	if memcpys != 2 {
		t.Errorf("%d memcpys, want 2 (one per tensor's buffer)", memcpys)
	}
}

// TestSimulatedFP8 runs every FP8 conformance case (and colocated ones,
// whose local copies quantize) through replay plans in each scaling mode,
// on flat and hier (agbcast does not convert), all ranks simulated
// together, and checks every E4M3 byte against quantizing the whole
// tensor: the plan's Quantize commands read the right regions into the
// right staging with the right scales, in an order the events enforce.
func TestSimulatedFP8(t *testing.T) {
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	colocated, err := transporttest.ColocatedCases(transporttest.ParsePairs(strings.NewReader(
		"256x128 | bf16 | 2 | S0 | 2 | S1\n130x260 | f32 | 1 | S0 | 2 | S0\n"+
			// layouts whose scales need no exchange: each part to itself
			// (a Fuse straight into the destination), a replicated
			// source to shards of it (Fuses into the FP8 part, copies out)
			"300x260 | bf16 | 1 | S0 | 1 | S0\n256x256 | bf16 | 2 | R | 2 | R\n256x256 | f32 | 2 | R | 2 | S1\n"), "colocated"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range colocated {
		cases = append(cases, c.FP8())
	}
	fp8Variants := []variant{
		{route: reshard.Flat, domains: 1},
		{route: hier.Hier{}, domains: 2, runs: 2},
		{route: reshard.Flat, domains: 1, padded: true, coalesce: 1 << 10},
		{route: reshard.Flat, domains: 1, chunk: 1 << 20}, // a message a part
	}
	runs, quants, fuses, checks, nans := 0, 0, 0, 0, 0
	for ci, c := range cases {
		for mi, mode := range []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor} {
			for vi, v := range fp8Variants {
				// the scales exchanged (a host driver's), then the
				// plan's own where the layouts allow (a device
				// driver's), then those with a NaN in the source
				for si, self := range []struct{ on, nan bool }{{false, false}, {true, false}, {true, true}} {
					if self.nan && vi > 0 && v.chunk == 0 {
						continue
					}
					topo := replaytest.DomainTopology(t, c, v.domains)
					r := rand.New(rand.NewPCG(uint64(ci), uint64(100*mi+10*vi+si)))
					chunk := int64(4 << 10)
					if v.chunk > 0 {
						chunk = v.chunk
					}
					env := replaytest.Env{Topo: topo, Opts: reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: max(32<<10, 8*chunk)},
						Coalesce: v.coalesce, Padded: v.padded, Runs: v.runs, FP8: mode, Self: self.on, NaN: self.nan}
					heap := &countingHeap{}
					if err := replaytest.RunCase(heap, env, c, v.route, r); err != nil {
						t.Fatalf("%v, %v scales, %s over %d domains (views %v, coalesce %d, self %v, NaN %v): %v", c, mode, v.route.Name(), v.domains, v.padded, v.coalesce, self.on, self.nan, err)
					}
					runs++
					quants += heap.quants
					fuses += heap.fuses
					checks += heap.checks
					if self.nan {
						nans += heap.checks
					}
				}
			}
		}
	}
	if quants == 0 || fuses == 0 || nans == 0 {
		t.Fatalf("%d Quantize, %d Fuse and %d Check commands (%d of them with a NaN) ran: each kind must", quants, fuses, checks, nans)
	}
	t.Logf("%d simulated FP8 reshards (%d quantize, %d fuse and %d check commands) checked byte by byte", runs, quants, fuses, checks)
}

// countingHeap counts the FP8 commands it runs.
type countingHeap struct {
	replaytest.GoHeap
	quants, fuses, checks int
}

func (h *countingHeap) Quantize(t replay.QuantTensor, q replay.QuantOp) error {
	h.quants++
	return h.GoHeap.Quantize(t, q)
}

func (h *countingHeap) Fuse(t replay.QuantTensor, q replay.QuantOp) error {
	h.fuses++
	return h.GoHeap.Fuse(t, q)
}

func (h *countingHeap) Check(src uint64, n int64, flag uint64) error {
	h.checks++
	return h.GoHeap.Check(src, n, flag)
}
