// Package hier is m2n's topology-aware layer, as pure code: the domains
// ranks belong to, the hierarchical route of NCCL M2N (one network copy
// per destination domain, leaders sharing the load, a ring between domains,
// local fan-out, chunked pipelining), the aggregate data-movement model that
// bounds every route, and the choice between routes.
//
//	topo, _ := hier.Domains(hostOfRank, src, dst, hier.DomainSizes{Dst: 8})
//	sched, _ := hier.Hier{}.Schedule(plans, topo, reshard.DefaultScheduleOptions)
//	stats, err := (&reshard.Executor{T: transport, Mem: mem}).Run(ctx, sched, buffers)
//
// Route turns the same Plan the flat route runs into a different Schedule:
// the executor, the transports and the conformance suite are shared.
package hier
