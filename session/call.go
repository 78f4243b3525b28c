package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/netem"
)

// Prepare prepares a call of the tensors in specs (names, both layouts,
// and this rank's views) on route, on the session's step runtime: it
// derives the topology (the discovered domains and the session's
// overrides, over the call's source and destination ranks), checks the
// plans, schedule, staging and scratch against the memory this rank has
// (CheckMemory), then validates, plans, schedules and compiles once, and
// agrees across ranks on the inputs and on the schedule built
// (refit.Runtime.Prepare). On GPUs the call's steps run on the replay
// driver (Options.Driver) where the host need not see them, else on the
// host driver.
//
// Every rank of the session must call it with the same specs and an equal
// route, and prepare the session's calls in the same order: that order is
// each call's identity, which every step checks (a rank running another
// call or step than the others makes every rank fail with a
// *refit.CallMismatchError). Errors: *control.AgreementError and
// *control.ValidationError on every rank alike, and a *MemoryError when a
// rank's plans, schedule, staging or scratch would not fit; a rank that
// does not come makes the others return a *control.AbortError wrapping a
// *control.TimeoutError that names it.
func (s *Session) Prepare(ctx context.Context, specs []refit.Spec, route reshard.Route) (*refit.Call, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	topo, err := s.topology(specs)
	if err != nil {
		err = fmt.Errorf("rank %d: %w", s.rank, err)
	}
	tr := s.dev.forTopology(s.base, topo)
	if s.nic != nil {
		tr = netem.Wrap(tr, topo, s.nic)
	}
	if s.opts.WrapTransport != nil {
		tr = s.opts.WrapTransport(tr)
	}
	opts := refit.Options{
		Name:          callName(specs),
		Plan:          reshard.Options{StripeReplicas: s.opts.Stripe},
		Schedule:      s.opts.schedule(),
		CoalesceBytes: s.opts.CoalesceBytes,
		Verify:        s.opts.Verify,
		Atomic:        s.opts.Atomic,
		Delta:         s.opts.Delta,
		Timeout:       s.opts.Timeout,
		Derived:       s.derived,
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
	// first step allocates them (CheckMemory).
	if err := s.checkCall(ctx, specs); err != nil {
		return nil, err
	}
	target := refit.Target{Transport: tr, Memory: s.dev.memory(), Topology: topo, Device: s.dev.driver(tr, s.driverOptions())}
	reused := s.derivedReused()
	c, err := s.rt.Prepare(ctx, specs, route, target, opts)
	if err != nil {
		return nil, err
	}
	if err := s.checkProgram(ctx, specs, c.Program()); err != nil {
		_ = c.Close()
		return nil, err
	}
	s.markPrepared(s.derivedReused() > reused)
	return c, nil
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

// group is the session as the step runtime's control.Group: its bounded
// control-plane collectives, abort notices and failure handling.
type group struct {
	*mpiControl
	s *Session
}

// Watch implements control.Group. A session of one rank has no peer to hear
// from.
func (g group) Watch(ctx context.Context, inline bool) (context.Context, func()) {
	if g.s.size == 1 {
		return ctx, func() {}
	}
	if inline {
		return g.mpiControl.watchInline(ctx)
	}
	return g.mpiControl.watch(ctx)
}

// Fail implements control.Group.
func (g group) Fail(err error) error { return g.s.fail(err) }

// Usable implements control.Group.
func (g group) Usable() error { return g.s.usable() }

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
// session (telling every peer why) and returns the *control.AbortError.
func (s *Session) fail(err error) error {
	if err == nil {
		return nil
	}
	var ve *control.ValidationError
	var ae *control.AgreementError
	var ce *refit.ChecksumError
	var cm *refit.CallMismatchError
	var me *MemoryError
	switch {
	case errors.As(err, &ve), errors.As(err, &ae), errors.As(err, &ce), errors.As(err, &cm), errors.As(err, &me):
		return err
	}
	var ab *control.AbortError
	own := !errors.As(err, &ab) // this rank's own failure, not a peer's notice
	var te *control.TimeoutError
	if at, d := pauses.last(); own && errors.As(err, &te) && te.Rank == s.rank && d >= s.opts.Timeout/2 && time.Since(at) <= 2*s.opts.Timeout {
		// its round timed out because this process did not run: the
		// peers it names waited for it, not it for them.
		err = &stoppedError{rank: s.rank, gap: d, timeout: s.opts.Timeout}
	}
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
