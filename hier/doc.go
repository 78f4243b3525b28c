// Package hier is the hierarchical route of NCCL M2N, as pure code, and the
// domains it routes between: each contribution crosses the network once
// into one destination domain, to a leader among the replicas that need
// it (leader loads differ by at most one, or bytes balance with
// BalanceBytes), leaders forward down a tree of domains and fan out to
// the other replicas over the local fabric, chunk by chunk through bounded
// staging.
//
//	topo, _ := hier.Domains(hostOfRank, src, dst, hier.DomainSizes{Dst: 8})
//	sched, _ := hier.Hier{}.Schedule(plans, topo, reshard.DefaultScheduleOptions)
//
// Hier turns the same plans the flat route runs into a different
// Schedule: the runtime, the transports and the conformance suite are
// shared. Package bounds bounds every route's time and picks among them
// (bounds.Auto); package transport/netem emulates a network between the
// domains on one machine.
package hier
