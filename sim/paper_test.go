package sim

import (
	"fmt"
	"math"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/units"
)

// paperLayer is the paper's single-layer experiment: a 7168 MB bf16 expert
// gate projection (256x2000x7000 bf16 is exactly 7.168e9 bytes; the
// paper's 256x2048x7168 would be 7.5 GB) on 16 EP source ranks (Shard(0))
// to TP8 x rho destination ranks ([R, S1]), sources in one domain and the
// destinations in another (an NVL72 holds all 64 at rho 8).
func paperLayer(t testing.TB, rho int) Stage {
	t.Helper()
	sm, _ := mesh.Interval([]int{16}, 0)
	dm, _ := mesh.Interval([]int{rho, 8}, 16)
	shape := []int64{256, 2000, 7000}
	src, err := placement.NewLayout(shape, dtype.BF16, sm, []placement.Placement{placement.Shard(0)})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := placement.NewLayout(shape, dtype.BF16, dm, []placement.Placement{placement.Replicate(), placement.Shard(1)})
	if err != nil {
		t.Fatal(err)
	}
	world := 16 + 8*rho
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	host := make([]int, world)
	for i := range host {
		host[i] = i
	}
	topo, err := hier.Domains(host, src, dst, hier.DomainSizes{Src: 16, Dst: 8 * rho})
	if err != nil {
		t.Fatal(err)
	}
	return Stage{Plans: []*reshard.Plan{plan}, Topo: topo}
}

// paperCluster is the paper's fabric at zero latency with free copies:
// 50 GB/s NICs, NVLink 900 GB/s, NVL72 domains.
var paperCluster = Cluster{Name: "paper", DomainGPUs: 72, NetBW: 50e9, GPUsPerNIC: 1, LocalBW: 900e9}

func simulatePaper(t testing.TB, rho int, route string, opts reshard.ScheduleOptions) *RouteResult {
	t.Helper()
	st := paperLayer(t, rho)
	rr, err := SimulateRoute(route, []Stage{st}, Setup{Cluster: paperCluster, World: 16 + 8*rho, Topo: st.Topo,
		Schedule: opts, Options: runOptions{Bins: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// TestPaperSingleLayer checks the simulator against the paper's bounds at
// zero latency: T_hier = 8.96 ms for every rho, T_flat = 17.92 / 35.84 /
// 71.68 ms. The simulator runs the real schedules (16 MiB chunks, 256 MiB
// staging), so it shows what they add to the bound:
//
//   - flat reaches its bound within 1% at every rho;
//   - hier ends within 1% of 8.96 ms at rho 2, 4 and 8 (issue 25's
//     target; 0.17%, 0.26% and 0.30% with hier's taper). Before hier's
//     local budget it ended 0.7%, 4.5% and 5.3% above: a leader forwards
//     (rho-1)*Ns/(K*rho) = 1.5 and 1.75 times what it receives per round,
//     and with the network's per-round budget for its fan-out the fan-out
//     fell behind; with the local budget, 0.7%, 1.0% and 1.2%: the last
//     two network rounds, which the executor runs side by side, end
//     together at the last network byte and their fan-out came after it.
//     hier's taper (hier/taper.go) ends the schedule with rounds of a
//     quarter of the budget, so what is left after the last network byte
//     is a quarter of that fan-out. The test pins it so that a change to
//     the schedule or to the simulator shows.
//
// Every route must stay at or above its bound.
func TestPaperSingleLayer(t *testing.T) {
	opts := reshard.DefaultScheduleOptions
	flatWant := map[int]float64{2: 17.92e-3, 4: 35.84e-3, 8: 71.68e-3}
	// hier's excess over 8.96 ms with these options: the tapered last
	// rounds' fan-out described above.
	hierExcess := map[int]float64{2: 0.01, 4: 0.01, 8: 0.01}
	for _, rho := range []int{2, 4, 8} {
		fl := simulatePaper(t, rho, "flat", opts)
		hr := simulatePaper(t, rho, "hier", opts)
		t.Logf("rho %d: flat %.3f ms (bound %.2f), hier %.3f ms (bound %.2f; critical path %v)", rho,
			fl.Result.Seconds*1e3, fl.Bound.Seconds*1e3, hr.Result.Seconds*1e3, hr.Bound.Seconds*1e3, hr.Result.Critical.Shares)
		if math.Abs(fl.Bound.Seconds-flatWant[rho]) > 1e-12 || math.Abs(hr.Bound.Seconds-8.96e-3) > 1e-12 {
			t.Fatalf("rho %d: bounds flat %g hier %g, want the paper's %g and 8.96 ms", rho, fl.Bound.Seconds, hr.Bound.Seconds, flatWant[rho])
		}
		if r := fl.Result.Seconds / flatWant[rho]; r < 1-1e-9 || r > 1.01 {
			t.Errorf("rho %d: flat %.4f ms is %.3fx its bound %.2f ms, want within 1%%", rho, fl.Result.Seconds*1e3, r, flatWant[rho]*1e3)
		}
		if r := hr.Result.Seconds / 8.96e-3; r < 1-1e-9 || r > 1+hierExcess[rho] {
			t.Errorf("rho %d: hier %.4f ms is %.3fx the bound 8.96 ms, want at most %.2fx", rho, hr.Result.Seconds*1e3, r, 1+hierExcess[rho])
		}
	}
}

// TestNeverBelowTheBound runs every route of the paper's layer at several
// chunkings and latencies: no simulated time may beat the model's bound.
func TestNeverBelowTheBound(t *testing.T) {
	for _, opts := range []reshard.ScheduleOptions{{ChunkBytes: 4 << 20, StagingBytes: 64 << 20}, {ChunkBytes: 64 << 20, StagingBytes: 1 << 30}} {
		for _, rho := range []int{2, 8} {
			for _, route := range []string{"flat", "agbcast", "hier", "auto"} {
				rr := simulatePaper(t, rho, route, opts)
				if rr.Result.Seconds < rr.Bound.Seconds*(1-1e-9) {
					t.Errorf("%s rho %d chunk %d: %.6g s beats its bound %.6g s", route, rho, opts.ChunkBytes, rr.Result.Seconds, rr.Bound.Seconds)
				}
			}
		}
	}
}

func ExampleSimulateRoute() {
	// 8 sources in one domain hand a 64 MiB tensor, rows to columns, to
	// 2 x 4 destinations in another, over 50 GB/s NICs.
	sm, _ := mesh.Interval([]int{8}, 0)
	dm, _ := mesh.Interval([]int{2, 4}, 8)
	src, _ := placement.NewLayout([]int64{4096, 8192}, dtype.BF16, sm, []placement.Placement{placement.Shard(0)})
	dst, _ := placement.NewLayout([]int64{4096, 8192}, dtype.BF16, dm, []placement.Placement{placement.Replicate(), placement.Shard(1)})
	plan, _ := reshard.NewPlan(src, dst, 16, reshard.Options{})
	host := make([]int, 16)
	for i := range host {
		host[i] = i
	}
	topo, _ := hier.Domains(host, src, dst, hier.DomainSizes{Src: 8, Dst: 8})
	cluster, _ := ParseCluster("custom:gpus=8,net=50GB/s,local=450GB/s")
	setup := Setup{Cluster: cluster, World: 16, Topo: topo, Options: runOptions{Bins: -1},
		Schedule: reshard.ScheduleOptions{ChunkBytes: 4 << 20, StagingBytes: 64 << 20}}
	for _, route := range routespec.Names {
		rr, err := SimulateRoute(route, []Stage{{Plans: []*reshard.Plan{plan}, Topo: topo}}, setup)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-7s %s (bound %s), critical path bound by %s\n", route, units.FormatSeconds(rr.Result.Seconds),
			units.FormatSeconds(rr.Bound.Seconds), rr.Result.Critical.Binding)
	}
	// Output:
	// flat    335.5 us (bound 335.5 us), critical path bound by nic-out r0
	// agbcast 1.734 ms (bound 1.342 ms), critical path bound by nic-out r0
	// hier    172.4 us (bound 167.8 us), critical path bound by nic-out r1
}
