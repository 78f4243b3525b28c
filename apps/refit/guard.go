package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
)

// refitOptions are the options of one call on this config: the route's
// schedule (nil when only checking inputs), the guarantees the flags ask
// for, and the settings every rank must agree on.
func (c *config) refitOptions(sched *reshard.Schedule, f *runFlags) reshard.RefitOptions {
	set := c.j.set
	o := reshard.RefitOptions{
		Route:    f.route,
		Build:    func([]*reshard.Plan) (*reshard.Schedule, error) { return nil, errors.New("refit: inputs checked only") },
		Plan:     reshard.Options{StripeReplicas: c.stripe},
		Schedule: set.opts.ScheduleOptions,
		Timeout:  set.timeout,
		Verify:   f.verify,
		Atomic:   f.atomic,
		Agree: []reshard.Field{
			{Name: "leader balance", Value: set.opts.Balance.String()},
			{Name: "domain sizes", Value: fmt.Sprintf("src %d, dst %d", set.sizes.Src, set.sizes.Dst)},
			{Name: "emulated network rate", Value: fmt.Sprint(set.emulate)},
			{Name: "device", Value: f.device},
			{Name: "timeout", Value: set.timeout.String()},
		},
		Watch: c.watch,
	}
	if sched != nil {
		o.Route = sched.Route
		o.Build = func([]*reshard.Plan) (*reshard.Schedule, error) { return sched, nil }
	}
	return o
}

// watch arms the watchdog over one collective phase of a call: if the phase
// has not finished within the timeout, a peer is gone or stuck, and this
// rank says so and aborts the whole job rather than wait forever.
func (c *config) watch(phase string) func() {
	j := c.j
	t := time.AfterFunc(j.set.timeout, func() {
		j.log.Error().Str("phase", phase).Str("tensor", c.name).Dur("timeout", j.set.timeout).
			Msgf("rank %d: the %s of tensor %s did not finish in %v: a peer is gone or stuck; aborting the job",
				c.rank, phase, c.name, j.set.timeout)
		mpi.Abort(j.comm, 4)
	})
	return func() { t.Stop() }
}

// fail turns a call's error into the job's: errors every rank agreed on
// (inputs that do not validate or agree, a failed checksum) fail every rank
// with one message; a timeout or a transport failure on this rank is
// reported with what it waited for, and the job is aborted so that no peer
// waits on this rank.
func (c *config) fail(err error) error {
	var ve *reshard.ValidationError
	var ae *reshard.AgreementError
	var ce *reshard.ChecksumError
	var te *reshard.TimeoutError
	switch {
	case errors.As(err, &ve), errors.As(err, &ae), errors.As(err, &ce), strings.Contains(err.Error(), "arrived with CRC-32C"):
		return jobError{err}
	case errors.As(err, &te):
		c.j.log.Error().Ints("waiting_for", te.Peers).Strs("tensors", te.Tensors).Int("round", te.Round).
			Msgf("rank %d: timed out after %v waiting for ranks %v (tensors %v); aborting the job", te.Rank, te.After, te.Peers, te.Tensors)
	default:
		c.j.log.Error().Err(err).Msgf("rank %d: %v; aborting the job", c.rank, err)
	}
	if c.tr != nil {
		c.tr.Abort(err)
	}
	mpi.Abort(c.j.comm, 5)
	return err
}

// faultAt reads a test-only fault switch, "rank" or "rank:n": it reports
// whether it names this rank, and n (0 if absent).
func faultAt(env string, rank int) (int, bool) {
	v := getenv(env)
	if v == "" {
		return 0, false
	}
	r, n, _ := strings.Cut(v, ":")
	rr, err := strconv.Atoi(r)
	if err != nil || rr != rank {
		return 0, false
	}
	k, _ := strconv.Atoi(n)
	return k, true
}

// killer is a test-only transport that kills its own process with SIGKILL
// when it starts round n (M2N_FAULT_KILL=rank:n: a rank lost in the middle
// of a transfer), or with hang set stops there for good (M2N_FAULT_HANG: a
// rank that is alive but stuck, which only timeouts can catch).
type killer struct {
	reshard.Transport
	at, n int
	hang  bool
}

func (k *killer) Start(ops []reshard.Op) (reshard.Pending, error) {
	if k.n == k.at {
		if k.hang {
			fmt.Fprintf(os.Stderr, "refit: rank %d: M2N_FAULT_HANG: stopping for good at round %d\n", k.Rank(), k.n)
			select {}
		}
		fmt.Fprintf(os.Stderr, "refit: rank %d: M2N_FAULT_KILL: killing myself at round %d\n", k.Rank(), k.n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	k.n++
	return k.Transport.Start(ops)
}

// MaxInPlaceBytes forwards the wrapped transport's in-place support.
func (k *killer) MaxInPlaceBytes() int64 { return reshard.MaxInPlace(k.Transport) }

// wireFault is a test-only transport that flips one byte of the first
// message its rank receives (M2N_FAULT_WIRE=rank), as a bad link would:
// --verify must catch it.
type wireFault struct {
	reshard.Transport
	done bool
}

func (w *wireFault) Start(ops []reshard.Op) (reshard.Pending, error) {
	p, err := w.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return &wirePending{Pending: p, w: w, ops: ops}, nil
}

// MaxInPlaceBytes forwards the wrapped transport's in-place support.
func (w *wireFault) MaxInPlaceBytes() int64 { return reshard.MaxInPlace(w.Transport) }

type wirePending struct {
	reshard.Pending
	w   *wireFault
	ops []reshard.Op
}

func (p *wirePending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	for _, o := range p.ops {
		hb, ok := o.Buf.(reshard.HostBuffer)
		if p.w.done || o.Send || !ok || o.Len == 0 {
			continue
		}
		at := o.Off
		if o.InPlace {
			at = o.At.Offset
		}
		hb[at] ^= 0x08
		p.w.done = true
	}
	return nil
}

// checkUntouched runs after an atomic call failed on every rank: each
// destination compares its buffer with what it held before the call (the
// poison), and the job's error says whether every destination is
// untouched, as the atomic mode promises.
func (c *config) checkUntouched(callErr error) error {
	changed := int64(0)
	if c.dstHost != nil {
		now := make([]byte, len(c.dstHost))
		if err := c.io.Download(now, c.dstBuf); err != nil {
			return errors.Join(callErr, err)
		}
		for i, b := range now {
			if b != reshard.PoisonByte || (i < len(c.dstHost) && c.dstHost[i] != reshard.PoisonByte) {
				changed = 1
				break
			}
		}
	}
	all := make([]int64, c.world)
	if err := c.comm.Allgather(int64Bytes([]int64{changed}), int64Bytes(all)); err != nil {
		return errors.Join(callErr, err)
	}
	for r, v := range all {
		if v != 0 {
			return jobError{fmt.Errorf("%w; atomic mode broken: rank %d's destination changed although the call failed", callErr, r)}
		}
	}
	return jobError{fmt.Errorf("%w; atomic: every destination still holds its previous bytes", callErr)}
}
