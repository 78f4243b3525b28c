package gpu

// Waiting for a step from the host: bounded, polling the device, the
// communicators and the control plane.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/internal/pace"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/reshard"
)

// wait polls done until it reports the step complete, paced by package
// pace (it yields, and sleeps only once a late timer would cost under 2%
// of the wait); every ~100 microseconds it checks the communicators, ctx,
// the progress of the rounds against the timeout, and (every millisecond)
// Poll.
func (r *Replay) wait(ctx context.Context, done func() (bool, error)) error {
	pacer := pace.Start()
	start := time.Now()
	progress, next := start, 0 // next: the first step not known complete
	lastCheck, lastPoll := start, start
	for spin := 0; ; spin++ {
		ok, err := done()
		if err != nil {
			return r.stepError(next, err)
		}
		if ok {
			return nil
		}
		if spin < 16 {
			continue
		}
		now := time.Now()
		if now.Sub(lastCheck) >= 100*time.Microsecond || spin == 16 {
			lastCheck = now
			if err := ctx.Err(); err != nil {
				if cause := context.Cause(ctx); cause != nil {
					return cause
				}
				return err
			}
			if r.hasNCCL {
				for _, class := range []reshard.LinkClass{reshard.LinkNetwork, reshard.LinkLocal} {
					c, _ := r.t.Comm(class)
					if err := c.AsyncError(); err != nil && !errors.Is(err, nccl.ErrInProgress) {
						return r.stepError(next, err)
					}
				}
			}
			if r.opts.Poll != nil && now.Sub(lastPoll) >= time.Millisecond {
				lastPoll = now
				if err := r.opts.Poll(); err != nil {
					return err
				}
			}
			n, err := r.advance(next)
			if err != nil {
				return r.stepError(next, err)
			}
			if n != next {
				next, progress = n, now
			}
			if r.opts.Timeout > 0 && now.Sub(progress) > r.opts.Timeout {
				return r.timeout(next)
			}
		}
		pacer.Pause(ctx)
	}
}

// advance returns the first step from i on whose groups are not known to
// be done.
func (r *Replay) advance(i int) (int, error) {
	evs := r.events
	if r.graph != nil {
		evs = r.ext
	}
	for ; i < len(r.plan.Done); i++ {
		for _, e := range r.plan.Done[i] {
			ok, err := evs[e].Query()
			if err != nil || !ok {
				return i, err
			}
		}
	}
	return i, nil
}

// stuck returns the step a wait is stuck in: the first whose groups are not
// done, else the last.
func (r *Replay) stuck(i int) int {
	for ; i < len(r.plan.Done); i++ {
		if len(r.plan.Done[i]) > 0 {
			return i
		}
	}
	return len(r.prog.Rounds) - 1
}

// stepError names the rank, the round and its peers in a failure of the
// step.
func (r *Replay) stepError(next int, err error) error {
	if len(r.prog.Rounds) == 0 {
		return fmt.Errorf("gpu: rank %d: %w", r.prog.Rank, err)
	}
	i := r.stuck(next)
	return fmt.Errorf("gpu: rank %d, round %d (peers %v): %w", r.prog.Rank, r.prog.Rounds[i].Index, r.prog.PeersOf(i), err)
}

// timeout is the error of a round that made no progress in time.
func (r *Replay) timeout(next int) error {
	i := r.stuck(next)
	return &control.TimeoutError{Rank: r.prog.Rank, Round: r.prog.Rounds[i].Index, After: r.opts.Timeout,
		Peers: r.prog.PeersOf(i), Tensors: r.prog.TensorsOf(i)}
}
