// Package sim is a flow-level simulator of m2n's reshards on a modelled
// cluster. It runs the schedules the routes build (reshard.Flat,
// reshard.AllGatherBroadcast, hier.Hier, bounds.Auto), for one tensor or a
// whole model, at 256 to 4096 GPUs, so that what cannot run here is
// predicted from the planner's and the routes' own output rather than from
// a separate formula.
//
// # The cluster
//
// A Cluster is domains of DomainGPUs GPUs joined by a local fabric (NVLink
// behind an NVSwitch), each GPU with a share of a NIC into a network
// between domains: a NIC bandwidth and per-message latency, a local
// bandwidth and latency, and a copy bandwidth for local copies and for
// packing strided regions. Presets name the common machines (gb200-nvl72,
// hgx-h200); ParseCluster reads "custom:gpus=16,net=50GB/s,local=900GB/s"
// and overrides of a preset. Every GPU has four links: NIC out and in, local
// out and in; the switches behind them are non-blocking, so a flow is
// limited by its sender's out link and its receiver's in link only.
//
// Beyond bandwidth and latency (docs/sim.md): each NIC link has a message
// rate (Cluster.MsgRate, a token bucket of MsgBurst messages; the presets
// assume 50 M/s, burst 1024, which no published configuration reaches),
// and the network is a fat tree or, with Topology "rail", rail-optimised:
// a message between NICs of different rails leaves through the NIC of the
// sender's host on the receiver's rail (relayed over NVLink, as NCCL's PXN
// does). Result.Network says whether the rate held messages back and how
// many were relayed; a rate that binds on the critical path shows there as
// a "message rate" step.
//
// # Flows and fairness
//
// Flows share links max-min fairly, by progressive filling, recomputed at
// every flow arrival and completion. The recomputation is incremental: only
// the links an event touched are refilled, the flows leaving them capped at
// the rates the rest of the fabric gives them, and the region grows only
// where the new rates break a neighbour's conditions; flows on the same
// pair of links are one group with one rate. A slow oracle (the obvious
// progressive filling over every flow) checks it in the tests. Completions
// run on virtual time per link: the groups a link bounds all move at its
// level, so a level change reschedules the link, not each of its groups.
//
// # The executor's rounds
//
// The simulator's program holds, for every process (one driver on one
// rank), its rounds of messages, made from schedules in one place (the
// only code here that reads a reshard.Schedule, so that another source of
// per-rank rounds could feed the simulator through a constructor of its
// own). It runs them as the host driver (refit.NewHostDriver) does: rounds in
// order, at most two in flight (round w starts once the rank's rounds up
// to w-2 have completed and been unpacked), a round's local copies and
// packing on the rank first, all its receives and sends posted at once, a
// flow starting when both of its ends have posted it and its latency has
// passed, a round complete when all its flows are. Pipeline stages are
// parts of one program, concurrent (one executor per stage on a generator
// rank) or one after another.
//
// # Walk-through
//
// Plan the tensors, describe the placement, and simulate a route:
//
//	plan, _ := reshard.NewPlan(src, dst, world, reshard.Options{})
//	topo, _ := hier.Domains(host, src, dst, hier.DomainSizes{Src: 16, Dst: 64})
//	cluster, _ := sim.ParseCluster("gb200-nvl72")
//	setup := sim.Setup{Cluster: cluster, World: world, Topo: topo,
//		Schedule: reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30}}
//	rr, _ := sim.SimulateRoute("hier", []sim.Stage{{Plans: []*reshard.Plan{plan}, Topo: topo}}, setup)
//	rr.Result.Seconds          // the completion time
//	rr.Bound.Seconds           // the data-movement model's bound (bounds.Of)
//	rr.Result.Critical.Binding // the link the critical path spent the most time on
//
// For a whole model, package model lays it out and ModelStages plans it,
// one Stage per pipeline stage on its own communicator:
//
//	l, _ := model.New(m, trainer, generator)
//	topo, _ := sim.SideDomains(trainer.Ranks(), generator.Ranks(), 64, 64)
//	stages, _ := sim.ModelStages(l, topo, reshard.Options{StripeReplicas: true})
//	rr, _ := sim.SimulateRoute("hier", stages, setup)
//
// A Result has the completion time of every part and tensor, the critical
// path (the chain of posts, latencies, transfers and compute that ends last,
// each transfer with the link that bound it), what every link carried, and
// link utilisation over time (a fixed number of bins whose width doubles as
// the run grows). `refit sim` prints it; `refit plot` draws it.
//
// # What it leaves out
//
// Congestion inside the network and the switches (both non-blocking; a
// rail topology has no spine), transport protocol costs beyond the
// per-message latency and the message rate (rendezvous,
// kernel launches, host polling), the trainer's and generator's work around
// the reshard (gathering, converting or loading weights), and, for packing,
// the fused views the model package places some tensors in (packing is
// judged on the dense layouts). Everything it simulates is deterministic:
// the same program on the same cluster gives the same result, bit for bit.
package sim
