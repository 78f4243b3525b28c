package perf_test

import (
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/perf"
)

func contains(t *testing.T, name string, write func(*strings.Builder) error, want ...string) {
	t.Helper()
	var b strings.Builder
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("%s lacks %q:\n%s", name, w, b.String())
		}
	}
}

// TestReportsText: every report's text form holds what the commands
// printed before the reports moved here.
func TestReportsText(t *testing.T) {
	run := &perf.RunReport{World: 8, Source: "8x4 f32 on 4[0-3] S0", Destination: "8x4 f32 on 2x2[4-7] R,S0", Bytes: 128, Fingerprint: "19a03a431cef678b",
		ChunkBytes: 16 << 20, Staging: 256 << 20, EmulatedBW: 5e7, Fabric: bounds.Fabric{NetBW: 5e7, LocalBW: 2e9},
		Routes: []perf.RouteReport{{Route: "hier", Iters: 3, MedianSec: 1e-3, MinSec: 9e-4, MaxSec: 2e-3, TensorGBps: 1.5, BoundSec: 5e-4,
			Binding: "network", Ratio: 2, Check: "passed", Rounds: 3, Ranks: []perf.RankTraffic{{Rank: 0, Role: "src", Sent: 32}, {Rank: 9, Role: "idle"}}},
			{Route: "plain", Iters: 3, MedianSec: 1e-3, Extra: perf.PlainReport{Baseline: "plain exchange", MedianSec: 8e-4, ReshardRoute: "hier", ReshardSec: 1e-3, Ratio: 0.8}}}}
	contains(t, "run", func(b *strings.Builder) error { return run.WriteText(b) }, "source:      8x4 f32 on 4[0-3] S0", "fingerprint 19a03a431cef678b, chunk 16 MiB",
		"emulated network 50 MB/s per rank between domains", "route hier: 1 ms per iteration (median of 3; min 900 us, max 2 ms), 1.50 GB/s of tensor, 3 rounds; check passed",
		"model bound 500 us (network binds): time is 2.00x the bound", "baseline, plain exchange:", "reaches 80% of the plain exchange's bandwidth")
	sync := &perf.SyncReport{Model: "m", Tensors: 2, Params: 10, Bytes: 20, Trainer: "tp=1", Generator: "tp=2", World: 3, MedianSec: 0.1, Iters: 2, Check: "passed",
		Completed: 2, Stages: []perf.StageReport{{Stage: 0, Route: "hier", Tensors: 2, Bytes: 20, Rounds: 1, MedianSec: 0.1}},
		Ranks: []perf.SyncRank{{Rank: 0, Role: "trainer", Share: 10}}, Bounds: []bounds.Bound{{Route: "hier", Seconds: 0.05, Binding: "network"}},
		Compare: &perf.CompareRun{PerTensorSec: 0.3, BatchedSec: 0.1, Speedup: 3, BoundRoute: "hier", BoundSec: 0.05, OverBound: 2}}
	contains(t, "sync", func(b *strings.Builder) error { return sync.WriteText(b) }, "model m: 2 tensors, 10 parameters, 20 B",
		"100 ms per step (median of 2;", "check passed; 2 tensors completed", "bound hier     50 ms (network binds)", "one call per tensor: 300 ms per step")
	sweep := &perf.SweepReport{Source: "2048x4096 bf16 on 2[0,1] S0", TP: 2, NetBW: 5e7}
	sweep.Add(2, 1, &perf.RunReport{Source: sweep.Source, Routes: []perf.RouteReport{{Route: "flat", MedianSec: 0.2}, {Route: "hier", MedianSec: 0.1, Ratio: 1.1}}})
	contains(t, "sweep", func(b *strings.Builder) error { return sweep.WriteText(b) }, "source 2048x4096 bf16 on 2[0,1] S0; destination DP rho x TP 2",
		"hier vs flat", "2.00x")
	soak := &perf.SoakReport{Count: 10, Seconds: 1, Pairs: 4, Warm: 5, Ranks: []perf.SoakRank{{Rank: 0, RSS: 1 << 20, RSSAfter: 2 << 20}}}
	contains(t, "soak", func(b *strings.Builder) error { return soak.WriteText(b) }, "10 checked reshards (4 layout pairs x 3 arrangements",
		"largest growth: RSS 1 MiB")
}
