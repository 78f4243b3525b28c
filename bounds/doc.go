// Package bounds is m2n's aggregate data-movement model as pure code: the
// speed-of-light time of every route for a reshard (its bandwidth terms,
// the one that binds, and the startup the terms leave out), and Auto, the
// route that picks, per call or per bucket of tensors, the route those
// bounds predict fastest.
//
// A Problem is what the bounds need to know about a call: the unique bytes
// B, the source injection paths Ns, the destination replication rho, and
// per destination domain its bytes, ranks and local copies. FromPlan and
// ProblemOf derive it from the planner's plans and a topology; Uniform
// states it by hand, as the paper does. A Fabric is the per-rank network
// and local bandwidths and a per-message latency:
//
//	p := bounds.ProblemOf(plans, topo, float64(opts.ChunkBytes))
//	for _, b := range bounds.Of(p, bounds.Fabric{NetBW: 50e9, LocalBW: 900e9}) {
//		fmt.Println(b.Route, b.Seconds, b.Binding) // hier 0.00896 source injection B/(Ns*BN)
//	}
//
// Routes are values: Auto{Fabric: f} schedules like any reshard.Route
// (package routespec reads the route grammar people write).
package bounds
