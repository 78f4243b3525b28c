package sim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/reshard"
)

// BenchmarkScale simulates a whole DeepSeek-V3 (package model's layouts)
// refit on GB200 NVL72s (64 GPUs used per domain) as the ranks grow: half
// of them train (Megatron tp=1, pp=4, ep=16, dp = ranks/8, so expert-DP
// grows with the ranks), half generate (vLLM tp=8, dp = ranks/16), every
// replica sending (--stripe), 64 MiB chunks, 1 GiB staging, 1 MiB
// coalescing, the stages concurrent. Each sub-benchmark runs once
// (-benchtime 1x) and reports the messages, the flow events (arrivals and
// completions), the cost per flow event, the time to plan and schedule
// (build) and to simulate, the live heap after building the program, the
// process's peak resident memory so far, the simulated time, the route's
// bound (RouteResult.Bound) and the ratio of the two. Ranks:
// M2N_SCALE_RANKS (default 256,512,1024,2048,4096); routes: hier and flat.
func BenchmarkScale(b *testing.B) {
	ranks := []int{256, 512, 1024, 2048, 4096}
	if s := os.Getenv("M2N_SCALE_RANKS"); s != "" {
		ranks = ranks[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 256 || n%256 != 0 {
				b.Fatalf("M2N_SCALE_RANKS %q: want multiples of 256", s)
			}
			ranks = append(ranks, n)
		}
	}
	m, err := model.Load("deepseek-v3", model.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c, _ := Preset("gb200-nvl72")
	for _, n := range ranks {
		for _, route := range []string{"hier", "flat"} {
			b.Run(fmt.Sprintf("ranks=%d/route=%s", n, route), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					scaleOnce(b, m, c, n, route)
				}
			})
		}
	}
}

// cpuSeconds is the process's CPU time so far (user and system, all
// threads): on a machine shared with other work it measures the
// simulator's own cost where wall time does not.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func scaleOnce(b *testing.B, m *model.Model, c Cluster, n int, route string) {
	start := time.Now()
	cpu0 := cpuSeconds()
	tr := model.Trainer{TP: 1, PP: 4, DP: n / 8, EP: 16}
	gen := model.Generator{TP: 8, DP: n / 16}
	l, err := model.New(m, tr, gen)
	if err != nil {
		b.Fatal(err)
	}
	topo, err := SideDomains(tr.Ranks(), gen.Ranks(), 64, 64)
	if err != nil {
		b.Fatal(err)
	}
	stages, err := ModelStages(l, topo, reshard.Options{StripeReplicas: true})
	if err != nil {
		b.Fatal(err)
	}
	setup := Setup{Cluster: c, World: n, Topo: topo, Schedule: reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30},
		CoalesceBytes: 1 << 20, Options: runOptions{Bins: 128}}
	var built time.Time
	var heap uint64
	var gc time.Duration
	var cpuBuilt, cpuGC float64
	setup.beforeRun = func() {
		t := time.Now()
		c0 := cpuSeconds()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = ms.HeapAlloc
		built = time.Now()
		gc = built.Sub(t)
		cpuBuilt = cpuSeconds()
		cpuGC = cpuBuilt - c0
	}
	rr, err := SimulateRoute(route, stages, setup)
	if err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	cpu1 := cpuSeconds()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	st := rr.Result.Stats
	simSec := end.Sub(built).Seconds()
	b.ReportMetric(float64(rr.Messages), "messages")
	b.ReportMetric(float64(st.FlowEvents), "flow-events")
	b.ReportMetric((cpu1-cpuBuilt)*1e9/float64(st.FlowEvents), "cpu-ns/flow-event")
	b.ReportMetric(cpuBuilt-cpuGC-cpu0, "build-cpu-s")
	b.ReportMetric(cpu1-cpuBuilt, "sim-cpu-s")
	b.ReportMetric((built.Sub(start) - gc).Seconds(), "build-s")
	b.ReportMetric(simSec, "sim-s")
	b.ReportMetric((end.Sub(start) - gc).Seconds(), "total-s")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB")
	b.ReportMetric(rr.Result.Seconds, "simulated-s")
	b.ReportMetric(rr.Bound.Seconds, "bound-s")
	b.ReportMetric(rr.Ratio(), "sim/bound")
	b.ReportMetric(float64(st.Growths+st.Solves)/float64(st.Solves), "fills/solve")
	b.ReportMetric(st.MeanRegion, "region-links")
}
