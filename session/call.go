package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Call is a refit prepared once on a session and run every step: its
// plans, schedule and this rank's compiled program, agreed across ranks,
// with the executor that keeps its staging between steps.
type Call struct {
	s     *Session
	route reshard.Route
	prep  *refit.Prepared
	ex    *refit.Executor
	tr    transport.Transport
	// runner replays steps on the GPU (nil: the executor drives them);
	// driver says which of the two runs them.
	runner callRunner
	driver Driver
	// launched: a step queued by Launch and not yet waited for.
	launched   bool
	launchedAt time.Time
}

// Driver is what runs a call's steps on GPUs.
type Driver string

const (
	// DriverReplay queues a whole step on the GPU's streams (batched
	// copies, NCCL groups and the events that order them) and waits once,
	// at the end: the default on GPUs without Verify.
	DriverReplay Driver = "replay"
	// DriverGraph is DriverReplay with the step captured once (per set of
	// buffers) as a CUDA graph and launched as one.
	DriverGraph Driver = "graph"
	// DriverHost drives the step round by round from the host
	// (reshard.Executor), as on CPUs, and as Verify needs (it reads every
	// message back to checksum it).
	DriverHost Driver = "host"
)

// ParseDriver reads a driver name: replay, graph or host.
func ParseDriver(s string) (Driver, error) {
	switch d := Driver(s); d {
	case DriverReplay, DriverGraph, DriverHost:
		return d, nil
	}
	return "", fmt.Errorf("unknown driver %q: want replay, graph or host", s)
}

// memcpyMin is M2N_MEMCPY_MIN, the size in bytes from which the replay
// runs a contiguous local copy as a memcpy rather than in the batched copy
// kernel (0, unset or unparsable: the replay's default, 64 MiB; negative:
// never): a knob for measuring.
func memcpyMin() int64 {
	n, err := strconv.ParseInt(os.Getenv("M2N_MEMCPY_MIN"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// defaultDriver is the GPU driver of new calls: M2N_GPU_DRIVER if set,
// else DriverReplay.
func defaultDriver() Driver {
	if d, err := ParseDriver(os.Getenv("M2N_GPU_DRIVER")); err == nil {
		return d
	}
	return DriverReplay
}

// Prepare prepares a call of the tensors in specs (names, both layouts,
// and this rank's views) on route: it derives the topology (the discovered
// domains and the session's overrides, over the call's source and
// destination ranks), then validates, plans, schedules and compiles once,
// and agrees across ranks on the inputs and on the schedule built
// (reshard.Prepare). Every rank of the session must call it with the same
// specs and an equal route. Errors: *reshard.AgreementError and
// *reshard.ValidationError on every rank alike, and a *MemoryError when a
// rank's plans, schedule, staging or scratch would not fit the memory it
// has (CheckMemory); a rank that does not come
// makes the others return a *reshard.AbortError wrapping a
// *reshard.TimeoutError that names it.
func (s *Session) Prepare(ctx context.Context, specs []refit.Spec, route reshard.Route) (*Call, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	topo, err := s.topology(specs)
	if err != nil {
		err = fmt.Errorf("rank %d: %w", s.rank, err)
	}
	tr := s.dev.forTopology(s.base, topo)
	if s.nic != nil {
		tr = hier.EmulateOn(tr, topo, s.nic)
	}
	if s.opts.WrapTransport != nil {
		tr = s.opts.WrapTransport(tr)
	}
	opts := refit.CallOptions{
		Plan:          reshard.Options{StripeReplicas: s.opts.Stripe},
		Schedule:      s.opts.schedule(),
		CoalesceBytes: s.opts.CoalesceBytes,
		Verify:        s.opts.Verify,
		Atomic:        s.opts.Atomic,
		// the session's options were agreed at Join.
	}
	if err != nil {
		// the topology could not be built here: let the agreement spread
		// the error instead of failing alone.
		specs = nil
		route = badRoute{err}
	}
	// the plans and the schedule are checked against the memory there is
	// before they are built, the program's staging and scratch before its
	// first run allocates them (CheckMemory).
	if err := s.checkCall(ctx, specs); err != nil {
		return nil, err
	}
	prep, perr := refit.Prepare(ctx, s.ctl, specs, route, topo, transport.MaxInPlace(tr), opts)
	if perr != nil {
		return nil, s.fail(perr)
	}
	if err := s.checkProgram(ctx, specs, prep.Program); err != nil {
		return nil, err
	}
	c := &Call{s: s, route: route, prep: prep, tr: tr, driver: DriverHost,
		ex: &refit.Executor{T: tr, Mem: s.dev.memory(), Timeout: s.opts.Timeout}}
	if !s.opts.Verify && !converts(prep) {
		r, err := s.dev.runner(tr, prep.Program, nccl.ReplayOptions{Timeout: s.opts.Timeout, Poll: s.ctl.poll, MemcpyMin: memcpyMin()})
		if err != nil {
			return nil, s.fail(fmt.Errorf("rank %d: %w", s.rank, err))
		}
		if r != nil {
			c.runner = r
			if err := c.SetDriver(defaultDriver()); err != nil {
				_ = r.Close()
				return nil, s.fail(err)
			}
		}
	}
	s.calls[c] = true
	return c, nil
}

// converts reports whether a call converts a tensor in flight (FP8): its
// quantizing packs and amax exchange run on the host driver.
func converts(p *refit.Prepared) bool {
	for _, pl := range p.Plans {
		if pl.Converts() {
			return true
		}
	}
	return false
}

// SetDriver picks what runs the call's steps on GPUs (DriverReplay by
// default, or M2N_GPU_DRIVER). It is this rank's choice alone: the bytes
// that move, and the order in which they pair up between ranks, are the
// same with every driver. With Verify, with a tensor converted in flight
// (FP8), or where the call's transport is
// not NCCL itself (network emulation, a WrapTransport), or on CPUs, only
// DriverHost runs and other choices are an error.
func (c *Call) SetDriver(d Driver) error {
	if _, err := ParseDriver(string(d)); err != nil {
		return err
	}
	if d != DriverHost && c.runner == nil {
		return fmt.Errorf("rank %d: driver %s needs a GPU call without Verify on the NCCL transport itself; this call runs on the host driver", c.s.rank, d)
	}
	if c.runner != nil && d != DriverHost {
		if err := c.runner.SetGraph(d == DriverGraph); err != nil {
			return err
		}
		c.ex.Runner = c.runner
	} else {
		c.ex.Runner = nil
	}
	c.driver = d
	return nil
}

// Driver returns what runs the call's steps.
func (c *Call) Driver() Driver { return c.driver }

// GraphError returns why DriverGraph fell back to queuing the commands of
// the step (a capture the driver or NCCL refused), or nil when it did not.
func (c *Call) GraphError() error {
	if c.runner == nil || c.driver != DriverGraph {
		return nil
	}
	return c.runner.GraphError()
}

// badRoute carries a local error into the agreement: its Schedule fails.
type badRoute struct{ err error }

func (badRoute) Name() string { return "none" }
func (b badRoute) Schedule([]*reshard.Plan, reshard.Topology, reshard.ScheduleOptions) (*reshard.Schedule, error) {
	return nil, b.err
}

// topology builds a call's topology from the discovered domains and the
// overrides: source ranks are the call's source mesh ranks in order of
// first appearance over its specs, and destination ranks likewise.
func (s *Session) topology(specs []refit.Spec) (reshard.Topology, error) {
	var src, dst []int
	for _, sp := range specs {
		for _, pair := range []struct {
			m    []int
			into *[]int
		}{{sp.Src.Mesh().Ranks(), &src}, {sp.Dst.Mesh().Ranks(), &dst}} {
			for _, r := range pair.m {
				if !slices.Contains(*pair.into, r) {
					*pair.into = append(*pair.into, r)
				}
			}
		}
	}
	for _, r := range append(slices.Clone(src), dst...) {
		if r < 0 || r >= s.size {
			return reshard.Topology{}, fmt.Errorf("a mesh names rank %d, outside a session of %d ranks", r, s.size)
		}
	}
	return hier.DomainsOf(s.hosts, src, dst, s.opts.Domains)
}

// Run moves one step's data: bufs holds this rank's buffers, one entry per
// spec in spec order (see reshard.Prepared.Run; buffers come from the
// session's Memory). Every wait is bounded by the session's timeout. On a
// failure that the ranks agreed on (a bad buffer anywhere, a checksum
// mismatch) every rank returns the same typed error and the session stays
// usable. On a failure of this rank alone (a timeout, a transport error, a
// cancelled ctx) it aborts the session: every peer is told and returns a
// *reshard.AbortError naming this rank and wrapping the cause.
func (c *Call) Run(ctx context.Context, bufs []refit.TensorBuffers) (*refit.Report, error) {
	s := c.s
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(bufs) != len(c.prep.Specs) {
		return nil, fmt.Errorf("rank %d: %d buffer pairs for a call of %d tensors", s.rank, len(bufs), len(c.prep.Specs))
	}
	if c.launched {
		if _, err := c.Wait(ctx); err != nil {
			return nil, err
		}
	}
	// The host driver's waits need a watcher for peers' abort notices; a
	// replay's single wait polls the control plane itself, and a session
	// of one rank has no peer to hear from.
	wctx, stop := ctx, func() {}
	if c.ex.Runner == nil && s.size > 1 {
		wctx, stop = s.ctl.watch(ctx)
	}
	rep, err := c.prep.Run(wctx, c.ex, s.ctl, bufs)
	stop()
	if err != nil {
		return rep, s.fail(err)
	}
	return rep, nil
}

// Refuse takes part in one step, in place of Run, for a rank that cannot
// run it because of what only it can tell about its own inputs (err: a
// buffer of another dtype or device, a non-contiguous tensor), so that
// every rank fails at the buffer check before a byte moves, with err,
// typed, in a *reshard.ValidationError, and the session stays usable,
// instead of the others waiting for this rank until the timeout (see
// reshard.Prepared.Refuse). The other ranks call Run as usual.
func (c *Call) Refuse(ctx context.Context, err error) error {
	s := c.s
	if uerr := s.usable(); uerr != nil {
		return uerr
	}
	if c.launched {
		if _, werr := c.Wait(ctx); werr != nil {
			return werr
		}
	}
	wctx, stop := ctx, func() {}
	if s.size > 1 {
		wctx, stop = s.ctl.watch(ctx)
	}
	rerr := c.prep.Refuse(wctx, s.ctl, err)
	stop()
	return s.fail(rerr)
}

// Launch queues one step of the call on the GPU's streams and returns
// without waiting for it (DriverReplay or DriverGraph; not with Verify or
// Atomic, which need the host between rounds). It first checks this rank's
// buffers and agrees with every rank that every rank's are good (one small
// host collective, as Run does); the step then starts on the GPU after the
// work that after marks (an event the caller recorded on its own stream,
// after the optimizer step that wrote the weights, say; nil: none), and the
// returned event marks its end (make the next consumer's stream wait on
// it; it is recorded again by the next Launch). Wait waits for the step
// from the host and agrees on its outcome with every rank; a Launch or Run
// after a Launch without Wait waits first, so that the ranks' collectives
// stay in step. Errors are Run's.
func (c *Call) Launch(ctx context.Context, bufs []refit.TensorBuffers, after *cuda.Event) (*cuda.Event, error) {
	s := c.s
	if err := s.usable(); err != nil {
		return nil, err
	}
	if c.ex.Runner == nil {
		return nil, fmt.Errorf("rank %d: Launch needs a GPU call without Verify on the replay driver (this call runs on the %s driver)", s.rank, c.driver)
	}
	if c.s.opts.Atomic {
		return nil, fmt.Errorf("rank %d: Launch cannot run an atomic call (its commit needs every rank's outcome first): use Run", s.rank)
	}
	if len(bufs) != len(c.prep.Specs) {
		return nil, fmt.Errorf("rank %d: %d buffer pairs for a call of %d tensors", s.rank, len(bufs), len(c.prep.Specs))
	}
	if c.launched {
		if _, err := c.Wait(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := c.prep.Begin(ctx, c.ex.Mem, s.ctl, bufs); err != nil {
		return nil, s.fail(err)
	}
	ev, err := c.runner.Launch(bufs, after)
	if err != nil {
		return nil, s.fail(err)
	}
	c.launched, c.launchedAt = true, start
	return ev, nil
}

// Wait waits for the step the last Launch queued, bounded as Run's rounds
// are, and agrees with every rank on its outcome; it returns the step's
// report (Seconds from the Launch).
func (c *Call) Wait(ctx context.Context) (*refit.Report, error) {
	s := c.s
	if err := s.usable(); err != nil {
		return nil, err
	}
	if !c.launched {
		return nil, fmt.Errorf("rank %d: Wait without a Launch", s.rank)
	}
	c.launched = false
	st, err := c.runner.Wait(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	rep, err := c.prep.End(ctx, s.ctl, st, c.launchedAt)
	if err != nil {
		return rep, s.fail(err)
	}
	return rep, nil
}

// OnProgress sets fn to be called after every step (round) of a run that
// completes on this rank, with the bytes this rank has moved so far in the
// run and the tensors it is done with; nil turns it off. fn runs on the
// goroutine that called Run.
func (c *Call) OnProgress(fn func(bytes int64, tensors int)) { c.ex.Progress = fn }

// Bytes returns what this rank moves in one run: the bytes it sends,
// receives and copies, and the tensors it takes part in.
func (c *Call) Bytes() (bytes int64, tensors int) { return c.prep.Program.Moved() }

// Schedule returns the call's schedule.
func (c *Call) Schedule() *reshard.Schedule { return c.prep.Schedule }

// Program returns this rank's compiled program.
func (c *Call) Program() *reshard.Program { return c.prep.Program }

// Fingerprint returns the fingerprint of the schedule every rank agreed on.
func (c *Call) Fingerprint() uint64 { return c.prep.Fingerprint }

// Topology returns the call's topology.
func (c *Call) Topology() reshard.Topology { return c.prep.Topology }

// Plans returns the call's plans, one per spec.
func (c *Call) Plans() []*reshard.Plan { return c.prep.Plans }

// Specs returns the call's specs.
func (c *Call) Specs() []refit.Spec { return c.prep.Specs }

// Transport returns the transport the call runs on (after emulation and
// any WrapTransport).
func (c *Call) Transport() transport.Transport { return c.tr }

// Close frees the call's staging and scratch memory.
func (c *Call) Close() {
	c.release()
	delete(c.s.calls, c)
}

func (c *Call) release() {
	if c.ex != nil {
		c.ex.Close()
	}
	if c.runner != nil {
		_ = c.runner.Close()
		c.runner = nil
		c.ex.Runner = nil
	}
}

// usable fails once the session is closed or aborted.
func (s *Session) usable() error {
	if s.closed {
		return errors.New("m2n: session is closed")
	}
	if err := s.ctl.abortedErr(); err != nil {
		return err
	}
	return nil
}

// fail classifies a call's error: errors every rank agreed on leave the
// session usable; anything else is this rank's alone, so it aborts the
// session (telling every peer why) and returns the *reshard.AbortError.
func (s *Session) fail(err error) error {
	var ve *refit.ValidationError
	var ae *refit.AgreementError
	var ce *refit.ChecksumError
	var me *MemoryError
	switch {
	case errors.As(err, &ve), errors.As(err, &ae), errors.As(err, &ce), errors.As(err, &me):
		return err
	}
	var ab *refit.AbortError
	own := !errors.As(err, &ab) // this rank's own failure, not a peer's notice
	err = s.ctl.abort(err)
	if s.dev != nil {
		s.dev.abort(s.base)
	}
	if own && s.parent != nil && errors.As(err, &ab) && ab.Rank == s.rank {
		// a failed stage ends the whole job: the parent's ranks outside
		// this stage, waiting in a collective of the parent's, learn it
		// now and from whom, rather than time out on their own.
		_ = s.parent.ctl.abort(s.stageError(ab.Cause))
	}
	return err
}
