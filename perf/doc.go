// Package perf measures reshards the way refit does, as library code: a
// tensor's routes timed and checked (Pair, RunRoutes, BenchPlain), a whole
// model's steps (Sync, ComparePerTensor, SyncBaseline), the paper's sweep
// (SweepReport), a soak (GatherSoak), the local bandwidth and a plain
// exchange of the same bytes, and on GPUs the pack, quantize and replay
// benchmarks (PackUnpack, Quantize, Replay). Every timing is the slowest
// rank's, summarised in bounded memory (timings); local work that takes as
// long as its bytes (filling, poisoning, checking) runs bounded by progress
// rather than by a timeout (inSteps); every report has a JSON form and a
// text form (WriteText).
//
// A pair's routes on a session s of the job:
//
//	p, err := perf.NewPair(s, perf.PairConfig{Src: src, Dst: dst, Faults: perf.NoFaults})
//	defer p.Close()
//	rep, err := p.RunRoutes(perf.RoutesConfig{Routes: []string{"flat", "hier"},
//		Route: routespec.Options{Fabric: routespec.DefaultFabric()},
//		Measure: perf.MeasureConfig{Warmup: 1, Iters: 5, Check: true}})
//	rep.WriteText(os.Stdout) // on rank 0: every rank's copy holds every rank's traffic
//
// Every rank of the session calls every function alike: they agree, time
// and gather over the session's bounded collectives.
package perf
