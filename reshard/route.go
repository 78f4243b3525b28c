package reshard

// Route turns the plans of a call (one per tensor, all over one
// communicator) into a Schedule of messages in rounds over a topology.
// Flat and AllGatherBroadcast are routes of this package; package hier
// adds the hierarchical route and auto. A route is a plain value: its
// fields are its options, and every rank of a call must use an equal one
// (Prepare agrees on Name and on the route's printed value).
//
// Schedule must be deterministic: the same plans, topology and options
// give the same schedule on every rank.
type Route interface {
	// Name names the route in reports and errors ("flat", "hier", ...).
	Name() string
	// Schedule builds the route's schedule.
	Schedule(plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error)
}
