package session

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
)

// Call is a refit prepared once on a session and run every step: its
// plans, schedule and this rank's compiled program, agreed across ranks,
// with the executor that keeps its staging between steps.
type Call struct {
	s     *Session
	route reshard.Route
	prep  *reshard.Prepared
	ex    *reshard.Executor
	tr    reshard.Transport
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
func (s *Session) Prepare(ctx context.Context, specs []reshard.Spec, route reshard.Route) (*Call, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	topo, err := s.topology(specs)
	if err != nil {
		err = fmt.Errorf("rank %d: %w", s.rank, err)
	}
	tr := s.dev.forTopology(s.base, topo)
	if s.opts.EmulateNetBW > 0 {
		tr = hier.Emulate(tr, topo, s.opts.EmulateNetBW)
	}
	if s.opts.WrapTransport != nil {
		tr = s.opts.WrapTransport(tr)
	}
	opts := reshard.CallOptions{
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
	prep, perr := reshard.Prepare(ctx, s.ctl, specs, route, topo, reshard.MaxInPlace(tr), opts)
	if perr != nil {
		return nil, s.fail(perr)
	}
	if err := s.checkProgram(ctx, specs, prep.Program); err != nil {
		return nil, err
	}
	c := &Call{s: s, route: route, prep: prep, tr: tr,
		ex: &reshard.Executor{T: tr, Mem: s.dev.memory(), Timeout: s.opts.Timeout}}
	s.calls[c] = true
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
func (s *Session) topology(specs []reshard.Spec) (reshard.Topology, error) {
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
func (c *Call) Run(ctx context.Context, bufs []reshard.TensorBuffers) (*reshard.Report, error) {
	s := c.s
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(bufs) != len(c.prep.Specs) {
		return nil, fmt.Errorf("rank %d: %d buffer pairs for a call of %d tensors", s.rank, len(bufs), len(c.prep.Specs))
	}
	wctx, stop := s.ctl.watch(ctx)
	rep, err := c.prep.Run(wctx, c.ex, s.ctl, bufs)
	stop()
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
func (c *Call) Bytes() (bytes int64, tensors int) {
	p := c.prep.Program
	for i := range p.Steps {
		s := &p.Steps[i]
		for _, cp := range s.Copies {
			bytes += cp.Bytes
		}
		for _, list := range [][]reshard.Wire{s.Sends, s.Recvs} {
			for _, w := range list {
				bytes += w.Bytes
			}
		}
	}
	for _, k := range p.Done {
		if k >= 0 {
			tensors++
		}
	}
	return bytes, tensors
}

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
func (c *Call) Specs() []reshard.Spec { return c.prep.Specs }

// Transport returns the transport the call runs on (after emulation and
// any WrapTransport).
func (c *Call) Transport() reshard.Transport { return c.tr }

// Close frees the call's staging and scratch memory.
func (c *Call) Close() {
	c.release()
	delete(c.s.calls, c)
}

func (c *Call) release() {
	if c.ex != nil {
		c.ex.Close()
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
	var ve *reshard.ValidationError
	var ae *reshard.AgreementError
	var ce *reshard.ChecksumError
	var me *MemoryError
	switch {
	case errors.As(err, &ve), errors.As(err, &ae), errors.As(err, &ce), errors.As(err, &me):
		return err
	}
	err = s.ctl.abort(err)
	if s.dev != nil {
		s.dev.abort(s.base)
	}
	return err
}
