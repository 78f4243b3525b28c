package refit

import (
	"context"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// Spec is one named tensor of a call: its two layouts, the same on every
// rank, and where this rank's parts sit in its buffers (its own views; the
// zero value: dense buffers of exactly the part's size).
//
// A tensor converts to FP8 in flight when Dst's dtype is fp8e4m3 and Src's
// is bf16 or f32 (ConvertsTo); Scale then says which elements share a
// scale (fp8.Block: 128x128 over the last two dims, DeepSeek-V3's format;
// fp8.Row; fp8.Tensor), over the layouts' shape, whose last two dims are
// the matrix (leading dims, such as experts, index separate matrices).
// Every step the sources gather the amaxes of their parts, the ranks
// combine them so that every block's scale is that of quantizing the whole
// tensor at once (even where shard boundaries cut a block), and the
// senders quantize while packing: the destination's part receives E4M3
// bytes, bit for bit those of fp8.Quantize of the whole tensor, and its
// TensorBuffers.Scale the float32 scales (weight_scale_inv) of the blocks
// its part touches (ScaleBlocks). A NaN or infinite source element fails
// the step on every rank before any destination changes, naming the
// tensor and its first index (*NonFiniteError). Scale must be zero for a
// tensor that does not convert.
type Spec struct {
	Name     string
	Src, Dst placement.Layout
	Views    program.TensorViews
	Scale    fp8.Mode
}

// Options configure a call. Every rank must pass equal values (but for
// Timeout, which the session agrees on at join); Prepare checks that they
// do.
type Options struct {
	// Name names the call in errors and in its identity (see
	// CallMismatchError); it may be empty.
	Name string
	// Plan and Schedule are the planning and staging options.
	Plan     reshard.Options
	Schedule reshard.ScheduleOptions
	// CoalesceBytes: messages of one round between one pair of ranks that
	// are at most this large travel as one operation (see
	// program.CompileOptions).
	CoalesceBytes int64
	// Verify checksums every message on both sides (CRC-32C) and compares
	// the sums across ranks before a step succeeds.
	Verify bool
	// Atomic makes destinations receive into shadow buffers and copy them
	// in only once every tensor of the call has arrived (and verified) on
	// every rank: if a step fails, every destination buffer still holds its
	// old values, bit for bit.
	Atomic bool
	// Delta sends, each step but the first, only what changed: per
	// message, the source's region encoded against what it last sent
	// (package delta), applied in place by the destination; a step after
	// a failed step that was not Atomic is a full sync again. It needs
	// host memory and tensors that do not convert to FP8, and runs on the
	// host driver. Report.Stats says what moved (Sent) against what a
	// dense step moves (DenseSent).
	Delta bool
	// Timeout bounds every wait of the host driver for a round (0: none).
	Timeout time.Duration
	// Agree lists more fields that must match across ranks (the session
	// adds its device, domain overrides, timeout, ...).
	Agree []control.Field
	// Derived, if set, keeps what this rank derives (plans, schedule,
	// program) for later calls with the same inputs, and gives this call
	// what an earlier one derived (see Derived).
	Derived *Derived
}

// Target is where a call's bytes move on this rank: the transport (over
// the group's ranks, in the same order), the memory its buffers come from,
// and the topology its route schedules for.
type Target struct {
	Transport transport.Transport
	Memory    transport.Memory
	Topology  reshard.Topology
	// Device, if set, makes the driver of the call's compiled program on a
	// device (package refit/gpu's replay on GPUs). Prepare uses it for
	// calls whose steps the host need not see (no Verify, not in delta
	// mode; tensors converted to FP8 pack with StepInput.Quant's scales);
	// every other call, and every call without Device, runs on the host
	// driver (NewHostDriver).
	Device func(p *program.Program) (Driver, error)
}

// Call is a refit prepared once on a group of ranks and run every step:
// its tensors' specs, plans, schedule and this rank's compiled program,
// agreed across ranks, with the driver that moves its steps (and keeps
// its staging between them). Run (or Launch and Wait) moves one step;
// Close frees it. A Call's methods may be called from several goroutines:
// the group's runtime runs one step at a time.
type Call struct {
	rt          *Runtime
	number      int // its place in the group's calls, from 1: its identity
	name        string
	specs       []Spec
	plans       []*reshard.Plan
	sched       *reshard.Schedule
	prog        *program.Program
	fingerprint uint64
	topo        reshard.Topology
	tr          transport.Transport
	mem         transport.Memory
	driver      Driver
	opts        Options
	rank, world int

	needs   [][2]partNeed  // what this rank's buffers must be
	checked []bufferKey    // the buffers the last good check saw
	quant   []*quantTensor // per spec, for the tensors converted to FP8 (nil: none converts)
	delta   *deltaCall     // with Options.Delta
	steps   uint64         // steps begun
	// version is the last begun step's, nextVersion the next one's when
	// SetVersion gave it, held what the destination buffers hold.
	version, nextVersion uint64
	held                 Held
	launched             *step // a step Launch queued and Wait has not ended
	progress             func(bytes int64, tensors int)
	closed               bool
}

// Prepare validates a call's specs on this rank, plans every tensor,
// schedules the route over on.Topology, compiles this rank's program,
// makes the ranks agree, and picks the call's driver. Agreement is two
// small collectives:
//
//   - before scheduling, on everything the ranks were given (layouts,
//     names, route, topology, options): a rank given something else makes
//     every rank fail at once with an *control.AgreementError naming the first
//     rank and field that differ, and a rank whose input does not validate
//     makes every rank fail with a *control.ValidationError carrying its typed
//     error;
//   - after compiling, on a fingerprint of the schedule actually built (and
//     each rank's success): a rank that built another schedule is an
//     *control.AgreementError on field "schedule".
//
// Every rank of the group must call Prepare for the same calls in the same
// order; the order numbers them (their identity on the wire). A driver
// that cannot be built on this rank aborts the group (control.Group.Fail).
func (rt *Runtime) Prepare(ctx context.Context, specs []Spec, route reshard.Route, on Target, opts Options) (*Call, error) {
	g := rt.g
	if err := g.Usable(); err != nil {
		return nil, err
	}
	rank, world := g.Rank(), g.Size()
	topo := on.Topology
	hit, key := opts.Derived.lookup(rank, world, specs, route, on, opts)
	var plans []*reshard.Plan
	var localErr error
	if hit != nil {
		plans = hit.plans // validated and planned before, from these inputs
	} else {
		plans, localErr = validateSpecs(rank, world, specs, route, topo, opts)
	}
	if localErr == nil && (on.Transport == nil || on.Memory == nil) {
		localErr = fmt.Errorf("rank %d: a call needs a transport and a memory", rank)
	}
	if localErr == nil && (on.Transport.Rank() != rank || on.Transport.Size() != world) {
		localErr = fmt.Errorf("rank %d: the transport is rank %d of %d, the group rank %d of %d", rank, on.Transport.Rank(), on.Transport.Size(), rank, world)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := control.Agree(control.WithPhase(ctx, "agreement on the call's inputs"), g, callFields(specs, world, route, topo, opts), localErr); err != nil {
		return nil, g.Fail(err)
	}
	c := &Call{rt: rt, name: opts.Name, specs: specs, plans: plans, topo: topo, tr: on.Transport, mem: on.Memory, opts: opts, rank: rank, world: world, held: Held{Intact: true}}
	err := c.compileOrReuse(route, opts.Derived, hit, key)
	if err != nil {
		err = fmt.Errorf("rank %d: route %s: %w", rank, route.Name(), err)
	}
	if err := agreeSchedule(control.WithPhase(ctx, "agreement on the schedule built"), g, c.fingerprint, err); err != nil {
		return nil, g.Fail(err)
	}
	if on.Device != nil && !opts.Verify && !opts.Delta && len(specs) > 0 {
		c.driver, err = on.Device(c.prog)
	} else {
		c.driver, err = NewHostDriver(c.prog, c.tr, c.mem, opts.Timeout)
	}
	if err != nil {
		return nil, g.Fail(fmt.Errorf("rank %d: %w", rank, err))
	}
	rt.prepared++
	c.number = rt.prepared
	rt.open[c.number] = c
	return c, nil
}

// compile schedules, fingerprints and compiles the call on this rank.
func (c *Call) compile(route reshard.Route) error {
	if len(c.specs) == 0 {
		c.sched = &reshard.Schedule{Route: route.Name(), World: c.world}
		var err error
		c.prog, err = program.Compile(c.sched, c.rank, program.CompileOptions{})
		return err
	}
	names := make([]string, len(c.specs))
	views := make([]program.TensorViews, len(c.specs))
	for i, s := range c.specs {
		names[i], views[i] = s.Name, s.Views
	}
	sched, err := route.Schedule(c.plans, c.topo, c.opts.Schedule)
	if err != nil {
		return err
	}
	sched.TensorNames = names
	c.sched = sched
	c.fingerprint = scheduleFingerprint(sched, c.topo, c.opts.CoalesceBytes)
	if c.prog, err = program.Compile(sched, c.rank, program.CompileOptions{Views: views, MaxInPlace: transport.MaxInPlace(c.tr), CoalesceBytes: c.opts.CoalesceBytes}); err != nil {
		return err
	}
	if c.needs, err = partNeeds(sched, c.rank, views); err != nil {
		return err
	}
	return c.prepareState()
}

// prepareState makes what a call keeps of its own beside its compiled
// program, whether compiled or re-used (Derived): the FP8 state of the
// tensors that convert (their scales change every step) and, in delta
// mode, what the sources last sent.
func (c *Call) prepareState() error {
	var err error
	if c.quant, err = prepareQuant(c.rank, c.world, c.specs); err != nil || !c.opts.Delta {
		return err
	}
	plan, err := newDeltaPlan(c.prog, c.specs)
	if err != nil {
		return fmt.Errorf("delta mode: %w", err)
	}
	c.delta = &deltaCall{plan: plan}
	return nil
}

// validateSpecs checks this rank's inputs and plans every tensor. It
// returns the first problem as an error rather than failing, so that the
// agreement spreads it to every rank.
func validateSpecs(rank, world int, specs []Spec, route reshard.Route, topo reshard.Topology, opts Options) ([]*reshard.Plan, error) {
	if route == nil {
		return nil, fmt.Errorf("rank %d: no route", rank)
	}
	if err := opts.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	if opts.CoalesceBytes < 0 {
		return nil, fmt.Errorf("rank %d: %w", rank, &reshard.FieldError{Field: "coalesce bytes", Got: fmt.Sprint(opts.CoalesceBytes), Why: "must not be negative"})
	}
	if topo.Domain != nil && len(topo.Domain) != world {
		return nil, fmt.Errorf("rank %d: topology names %d ranks, the communicator has %d", rank, len(topo.Domain), world)
	}
	seen := map[string]bool{}
	plans := make([]*reshard.Plan, len(specs))
	for i, s := range specs {
		if s.Name == "" || seen[s.Name] {
			return nil, fmt.Errorf("rank %d, tensor %d: name %q is empty or repeated", rank, i, s.Name)
		}
		seen[s.Name] = true
		p, err := reshard.NewPlan(s.Src, s.Dst, world, opts.Plan)
		if err != nil {
			return nil, fmt.Errorf("rank %d, tensor %q: %w", rank, s.Name, err)
		}
		if err := checkScale(s, p); err != nil {
			return nil, fmt.Errorf("rank %d, tensor %q: %w", rank, s.Name, err)
		}
		plans[i] = p
		for side, l := range []placement.Layout{s.Src, s.Dst} {
			v := s.Views.Src
			if side == 1 {
				v = s.Views.Dst
			}
			if v.Dense() {
				continue
			}
			box, ok := l.RankBox(rank)
			if !ok {
				return nil, &program.ViewError{Rank: rank, Tensor: s.Name, Side: program.SideName(side), View: v, Why: "is given but the rank holds no part on this side"}
			}
			if err := v.Validate(box.Shape()); err != nil {
				return nil, &program.ViewError{Rank: rank, Tensor: s.Name, Side: program.SideName(side), View: v, Why: err.Error()}
			}
		}
	}
	return plans, nil
}

// Name returns the call's name (Options.Name).
func (c *Call) Name() string { return c.name }

// describe names the call in errors: "call #2 \"experts\"".
func (c *Call) describe() string {
	if c.name == "" {
		return fmt.Sprintf("call #%d", c.number)
	}
	return fmt.Sprintf("call #%d %q", c.number, c.name)
}

// Specs returns the call's specs.
func (c *Call) Specs() []Spec { return c.specs }

// Plans returns the call's plans, one per spec.
func (c *Call) Plans() []*reshard.Plan { return c.plans }

// Schedule returns the call's schedule.
func (c *Call) Schedule() *reshard.Schedule { return c.sched }

// Program returns this rank's compiled program.
func (c *Call) Program() *program.Program { return c.prog }

// Fingerprint returns the fingerprint of the schedule every rank agreed on.
func (c *Call) Fingerprint() uint64 { return c.fingerprint }

// Topology returns the call's topology.
func (c *Call) Topology() reshard.Topology { return c.topo }

// Transport returns the transport the call moves over.
func (c *Call) Transport() transport.Transport { return c.tr }

// Driver returns what moves the call's steps (the host driver, or the
// device driver Target.Device made).
func (c *Call) Driver() Driver { return c.driver }

// Bytes returns what this rank moves in one step: the bytes it sends,
// receives and copies, and the tensors it takes part in.
func (c *Call) Bytes() (bytes int64, tensors int) { return c.prog.Moved() }

// Steps returns how many steps of the call this rank has begun (run,
// launched or refused).
func (c *Call) Steps() uint64 {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.steps
}

// OnProgress sets fn to be called after every round of a step that
// completes on this rank, with the bytes this rank has moved so far in the
// step and the tensors it is done with (a device driver calls it once, at
// the end); nil turns it off. fn runs on the goroutine that called Run.
func (c *Call) OnProgress(fn func(bytes int64, tensors int)) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	c.progress = fn
}

// Close frees the call's driver. A step Launch queued and no
// Wait ended is waited for first (its error is returned).
func (c *Call) Close() error {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if c.closed {
		return nil
	}
	var err error
	if c.launched != nil {
		_, err = c.endLaunched(context.Background())
	}
	c.closed = true
	delete(c.rt.open, c.number)
	if c.delta != nil {
		c.delta.close(c.mem)
	}
	if derr := c.driver.Close(); err == nil {
		err = derr
	}
	return err
}
