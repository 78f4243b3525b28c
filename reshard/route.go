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

// BucketRoute is a Route that can add the messages of some of a call's
// tensors to a Builder that other routes share, so that tensors moved by
// different routes (a bucket each, say) fill the rounds of one schedule.
// Flat, AllGatherBroadcast and package hier's Hier are bucket routes.
type BucketRoute interface {
	Route
	// AddTensors adds the messages of plans[t] for every t of tensors
	// (indices into plans, which is the whole call) to b, as Schedule
	// would for those tensors alone.
	AddTensors(b *Builder, plans []*Plan, tensors []int, topo Topology, opts ScheduleOptions) error
}

// scheduleAll is a bucket route's Schedule: every tensor of the call on
// one builder.
func scheduleAll(r BucketRoute, plans []*Plan, topo Topology, opts ScheduleOptions) (*Schedule, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	b, err := NewBuilder(r.Name(), plans, topo, opts.RoundBytes())
	if err != nil {
		return nil, err
	}
	all := make([]int, len(plans))
	for i := range all {
		all[i] = i
	}
	if err := r.AddTensors(b, plans, all, topo, opts); err != nil {
		return nil, err
	}
	return b.Schedule(), nil
}

// StageRoute is a Route whose schedule can depend on the pipeline stage
// it serves: the stages of a model reshard at once into the same
// receivers, each on a communicator of its own, and stages with equal
// layouts would otherwise build equal schedules that walk the receivers
// in the same order at the same time (every stage's round r into the same
// few ranks). Whoever schedules stage s (session.Pipeline, the simulator)
// schedules ForStage(s); every rank of a stage's communicator passes the
// same s.
type StageRoute interface {
	Route
	// ForStage returns the route for stage s (s >= 0).
	ForStage(s int) Route
}
