package refit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// Report is what one step of a call did on this rank.
type Report struct {
	// Step is the step's number in the call, from 1; Version the version
	// every rank agreed it carries (see Call.SetVersion).
	Step, Version uint64
	// Completed lists the tensors that reached every destination rank (and
	// verified, with Verify), in call order; Failed the others.
	Completed, Failed []string
	Stats             Stats
	// Delta says the step was a delta step of a call in delta mode
	// (Options.Delta): its sends moved encodings, and Stats.DenseSent
	// says what they would have moved dense; or, where every rank found
	// every region it sends changed at every sampled element, they moved
	// dense as a full sync does (the ranks agree on it before a byte is
	// encoded), and DenseSent equals Sent. It is false for a full sync
	// (a call's first step, the step after Resync or after a failed step
	// that was not Atomic) and for every step of a call not in delta mode.
	Delta bool
	// Seconds is how long the step took on this rank, from its buffer
	// check to its last agreement.
	Seconds float64
}

// step is one step of a call in progress: begun (agreed, scales
// exchanged, shadows made), then moved by the driver, then ended.
type step struct {
	n       uint64
	start   time.Time
	bufs    []TensorBuffers // the caller's
	in      StepInput       // what the driver moves (shadows with Atomic)
	scales  *stepScales
	shadows []transport.Buffer
	version uint64
	// nonFinite: the tensors whose scales the driver computed came out
	// non-finite (Stats.NonFinite), failed at the end.
	nonFinite []int
	// begun: every rank agreed to begin it and its scales and shadows are
	// ready (bytes may move from here on); committing: an atomic step's
	// commit began; delta: a step of a call in delta mode that moves
	// encodings (not a full sync); dense: a step of a call in delta mode
	// that the driver moves dense because every source found its regions
	// changed throughout (reported as a delta step).
	begun, committing, delta, dense bool
}

// Run moves one step's data: bufs holds this rank's buffers, one entry per
// spec, in spec order (nil for a side the rank does not hold; with a view,
// the larger buffer the view places the part in; several specs may share
// one buffer through views that do not overlap). It is the whole step, and
// every rank of the group runs it for the same call:
//
//   - begin: this rank's buffers are checked and every rank agrees, in one
//     small collective, that every rank's are good and that every rank
//     begins this same step of this same call (a bad buffer anywhere is a
//     *control.ValidationError wrapping a *BufferError on every rank; ranks that
//     began different calls or steps all return a *CallMismatchError);
//     for tensors converted to FP8 the ranks then combine this step's
//     scales (a NaN anywhere fails every rank here, destinations
//     untouched; where a device driver scales a tensor itself,
//     TensorQuant.Self, the NaN shows in its scales after the move and
//     fails that tensor on every rank at the end, its destinations
//     written: Atomic keeps the previous version);
//   - move: the call's driver moves the bytes, its messages tagged with the
//     call and step;
//   - end: with Verify the ranks compare checksums, every rank agrees on
//     which tensors completed, and with Atomic the shadows are committed.
//
// Errors every rank agreed on (*control.ValidationError, *CallMismatchError,
// *ChecksumError; with Atomic nothing changed anywhere) leave the group
// usable. Any other error is this rank's alone (a timeout, a transport
// error, a cancelled ctx): the group aborts (control.Group.Fail), telling every
// peer, which returns a *control.AbortError naming this rank. A step Launch queued
// on any call of the group and not yet waited for is ended first.
func (c *Call) Run(ctx context.Context, bufs []TensorBuffers) (*Report, error) {
	rt := c.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.endLaunched(ctx); err != nil {
		return nil, err
	}
	g := rt.g
	if _, host := c.driver.(*hostDriver); host && g.Size() > 1 {
		// the host driver's waits end on a peer's abort notice (polled
		// by the waits themselves where the transport can); a device
		// driver polls for it itself.
		var stop func()
		ctx, stop = g.Watch(ctx, transport.PollsInline(c.tr))
		defer stop()
	}
	st, err := c.begin(ctx, bufs, nil)
	if err != nil {
		return c.failedReport(st), g.Fail(err)
	}
	var stats Stats
	if st.delta {
		stats, err = c.delta.move(ctx, c.driver.(*hostDriver), st.in, c.opts.Atomic)
	} else if stats, err = c.driver.Move(ctx, st.in); err == nil && c.delta != nil && st.in.Quant != nil {
		err = c.delta.quantSent(c.driver.(*hostDriver), st.in) // the codes a full step sent
	}
	st.nonFinite = stats.NonFinite
	if err == nil {
		// a pause of this process after the driver's last wait: a peer
		// may have given up on this rank meanwhile (transport.WithPoll)
		err = transport.PollOnce(ctx)
	}
	if err != nil {
		st.release(c.mem)
		c.settle(st, err)
		rep := c.failedReport(st)
		rep.Stats = stats
		return rep, g.Fail(err)
	}
	rep, err := c.end(ctx, st, stats)
	if err == nil {
		// a pause as long as the timeout in the end's collectives, which
		// do not count it: the peers that waited may have given up
		err = transport.PollOnce(ctx)
	}
	c.settle(st, err)
	return rep, g.Fail(err)
}

// Refuse takes part in one step, in place of Run, for a rank that cannot
// run it because of what only it can tell about its own inputs (err: a
// buffer of another dtype or device, a non-contiguous tensor), so that
// every rank fails at the buffer check before a byte moves, with err,
// typed, in a *control.ValidationError, and the group stays usable, instead of the
// others waiting for this rank until the timeout. The other ranks call
// Run as usual; should several ranks fail, every rank returns the lowest
// one's error. A nil err refuses without a reason.
func (c *Call) Refuse(ctx context.Context, err error) error {
	rt := c.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if lerr := rt.endLaunched(ctx); lerr != nil {
		return lerr
	}
	if err == nil {
		err = fmt.Errorf("rank %d refused the step", c.rank)
	}
	st, berr := c.begin(ctx, nil, err)
	if berr == nil { // cannot happen: the refusal fails the agreement
		st.release(c.mem)
		berr = errors.New("refit: a refused step was agreed")
	}
	return rt.g.Fail(berr)
}

// Launch begins one step as Run does (the buffer check and the call's
// identity agreed with every rank) and queues its move on the device
// without waiting for it: a call whose driver is a Launcher (the GPU
// replay), not Atomic (its commit needs every rank's outcome first). The
// step starts on the device after the work that after marks (an event the
// caller recorded on its own stream, after the optimizer step that wrote
// the weights, say; nil: none), and the returned event marks its end
// (make the next consumer's stream wait on it; the driver records it again
// at the next Launch). Wait ends the step: it waits for it from the host
// and agrees on its outcome with every rank. A Run, Refuse or Launch of
// any call of the group first ends a launched step, so that the ranks'
// collectives stay in step. Errors are Run's; a rank that cannot launch
// fails every rank's Launch with a *control.ValidationError.
func (c *Call) Launch(ctx context.Context, bufs []TensorBuffers, after Event) (Event, error) {
	rt := c.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.endLaunched(ctx); err != nil {
		return nil, err
	}
	l, ok := c.driver.(Launcher)
	var localErr error
	switch {
	case !ok:
		localErr = fmt.Errorf("rank %d: Launch needs a call moved by a device driver (this call runs on the %s driver: a CPU call, or one with Verify or FP8); use Run", c.rank, c.driver.Name())
	case c.opts.Atomic:
		localErr = fmt.Errorf("rank %d: Launch cannot run an atomic call (its commit needs every rank's outcome first): use Run", c.rank)
	}
	st, err := c.begin(ctx, bufs, localErr)
	if err != nil {
		return nil, rt.g.Fail(err)
	}
	ev, err := l.Launch(st.in, after)
	if err != nil {
		st.release(c.mem)
		c.settle(st, err)
		return nil, rt.g.Fail(err)
	}
	c.launched, rt.launched = st, c
	return ev, nil
}

// Wait ends the step the last Launch of this call queued: it waits for it,
// bounded as Run's rounds are, and agrees with every rank on its outcome;
// it returns the step's report (Seconds from the Launch).
func (c *Call) Wait(ctx context.Context) (*Report, error) {
	rt := c.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if c.launched == nil {
		return nil, fmt.Errorf("rank %d: Wait without a Launch of %s", c.rank, c.describe())
	}
	return c.endLaunched(ctx)
}

// endLaunched ends the step Launch queued.
func (c *Call) endLaunched(ctx context.Context) (*Report, error) {
	st := c.launched
	c.launched, c.rt.launched = nil, nil
	stats, err := c.driver.(Launcher).Wait(ctx)
	st.nonFinite = stats.NonFinite
	if err != nil {
		st.release(c.mem)
		c.settle(st, err)
		return c.failedReport(st), c.rt.g.Fail(err)
	}
	rep, err := c.end(ctx, st, stats)
	c.settle(st, err)
	return rep, c.rt.g.Fail(err)
}

// begin checks this rank's buffers, agrees with every rank on the step
// (localErr, when not nil, fails it on every rank), exchanges the FP8
// scales and makes the shadows: after it, bytes may move.
func (c *Call) begin(ctx context.Context, bufs []TensorBuffers, localErr error) (*step, error) {
	g := c.rt.g
	if c.closed {
		return nil, fmt.Errorf("rank %d: %s is closed", c.rank, c.describe())
	}
	if err := g.Usable(); err != nil {
		return nil, err
	}
	st := &step{n: c.steps + 1, start: time.Now(), bufs: bufs, version: c.stepVersion()}
	if localErr == nil {
		if len(bufs) != len(c.specs) {
			localErr = fmt.Errorf("rank %d: %d buffer pairs for %s of %d tensors", c.rank, len(bufs), c.describe(), len(c.specs))
		} else {
			localErr = c.checkRunBuffers(c.mem, bufs)
		}
	}
	full := c.delta != nil && c.delta.full()
	// a delta step whose every source region changed throughout moves as
	// a full sync: decided by all ranks together, before anything is
	// encoded (changedThroughout samples each region)
	dense := c.delta != nil && !full && localErr == nil && c.delta.changedThroughout(bufs)
	full, dense, err := c.rt.agreeBegin(control.WithPhase(ctx, "buffer check before a step"), c, st.n, st.version, full, dense, localErr)
	var mismatch *CallMismatchError
	if !errors.As(err, &mismatch) {
		c.steps = st.n // every rank began this step of this call
	}
	if err != nil {
		return st, err
	}
	st.in = StepInput{Bufs: bufs, Tag: wireTag(c.number, st.n), Verify: c.opts.Verify, Progress: c.progress}
	if len(c.specs) == 0 {
		st.begun = true
		return st, nil
	}
	if c.quant != nil {
		if st.scales, err = c.exchangeAmax(ctx, c.mem, g, bufs, c.driver.Name() != string(DriverHost)); err != nil {
			return st, err
		}
		st.in.Quant = st.scales.exec
	}
	if c.delta != nil {
		if err := c.delta.ensure(c.mem, c.needs, bufs); err != nil {
			return st, fmt.Errorf("rank %d: %w", c.rank, err)
		}
		c.delta.takeScales(c.quant, st.scales)
		st.delta, st.dense = !full && !dense, !full && dense
	}
	if c.opts.Atomic && !st.delta {
		if st.in.Bufs, st.shadows, err = c.shadow(bufs); err != nil {
			st.release(c.mem)
			return st, err
		}
	}
	st.begun = true
	return st, nil
}

// end finishes a step whose bytes the driver moved: scales, checksums,
// the completion agreement and, with Atomic, the commit.
func (c *Call) end(ctx context.Context, st *step, stats Stats) (*Report, error) {
	defer st.release(c.mem)
	g := c.rt.g
	if st.dense { // a delta step that went dense throughout
		stats.DenseSent = stats.Sent
	}
	rep := &Report{Step: st.n, Version: st.version, Stats: stats, Delta: st.delta || st.dense}
	defer func() { rep.Seconds = time.Since(st.start).Seconds() }()
	if len(c.specs) == 0 {
		return rep, nil
	}
	names := c.names()
	if st.scales != nil && !c.opts.Atomic {
		if err := c.deliverScales(c.mem, st.bufs, st.scales); err != nil {
			rep.Failed = names
			return rep, err
		}
	}
	failed := make([]byte, len(c.specs))
	var firstErr error
	for _, t := range st.nonFinite {
		if t < 0 || t >= len(c.specs) {
			return rep, fmt.Errorf("rank %d: the driver reported non-finite scales of tensor %d of %d", c.rank, t, len(c.specs))
		}
		failed[t] = 1
		if firstErr == nil {
			firstErr = c.nonFiniteSource(t, st.bufs)
		}
	}
	if c.opts.Verify {
		bad, err := compareSums(control.WithPhase(ctx, "checksum comparison"), g, c.sched, stats)
		if err != nil {
			rep.Failed = names
			return rep, err
		}
		for _, ce := range bad {
			failed[ce.tensor] = 1
			if firstErr == nil {
				firstErr = ce.err
			}
		}
	}
	allFailed, first, err := agreeStatus(control.WithPhase(ctx, "completion status of a step"), g, failed, firstErr)
	if err != nil {
		rep.Failed = names
		return rep, err
	}
	for i, n := range names {
		if allFailed[i] {
			rep.Failed = append(rep.Failed, n)
		} else {
			rep.Completed = append(rep.Completed, n)
		}
	}
	if first != nil {
		if c.opts.Atomic {
			rep.Completed, rep.Failed = nil, names
		}
		return rep, first
	}
	if c.opts.Atomic {
		st.committing = true
		if err := c.commit(st); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// failedReport is the report of a step that failed before its end: every
// tensor failed.
func (c *Call) failedReport(st *step) *Report {
	rep := &Report{Failed: c.names()}
	if st != nil {
		rep.Step, rep.Version = st.n, st.version
		rep.Seconds = time.Since(st.start).Seconds()
	}
	return rep
}

func (c *Call) names() []string {
	names := make([]string, len(c.specs))
	for i, s := range c.specs {
		names[i] = s.Name
	}
	return names
}

// shadow makes, for an atomic step, one shadow per distinct destination
// buffer: the driver writes into the shadows, and commit copies them in. A
// buffer that several parts share, or that a view places a part in,
// starts as a copy, so that its bytes outside the parts commit unchanged.
func (c *Call) shadow(bufs []TensorBuffers) ([]TensorBuffers, []transport.Buffer, error) {
	run := make([]TensorBuffers, len(bufs))
	copy(run, bufs)
	keys := make([]bufferKey, len(bufs))
	uses := map[bufferKey]int{}
	for i := range bufs {
		keys[i] = keyOf(c.mem, bufs[i].Dst, i)
		uses[keys[i]]++
		if !c.specs[i].Views.Dst.Dense() {
			uses[keys[i]]++
		}
	}
	var made []transport.Buffer
	shadowOf := map[bufferKey]transport.Buffer{}
	for i := range run {
		d := bufs[i].Dst
		if d == nil || d.Len() == 0 {
			continue
		}
		if sh, ok := shadowOf[keys[i]]; ok {
			run[i].Dst = sh
			continue
		}
		sh, err := c.mem.Alloc(d.Len())
		if err != nil {
			freeAll(c.mem, made)
			return nil, nil, fmt.Errorf("refit: shadow of tensor %q: %w", c.specs[i].Name, err)
		}
		made = append(made, sh)
		if uses[keys[i]] > 1 {
			all := strided.Desc{Run: d.Len()}
			if err := c.mem.Copy(sh, all, d, all); err != nil {
				freeAll(c.mem, made)
				return nil, nil, fmt.Errorf("refit: shadow of tensor %q: %w", c.specs[i].Name, err)
			}
		}
		shadowOf[keys[i]] = sh
		run[i].Dst = sh
	}
	return run, made, nil
}

// commit copies an atomic step's shadows into the destinations and writes
// the scales.
func (c *Call) commit(st *step) error {
	done := map[bufferKey]bool{}
	shadows := st.bufs
	if st.delta { // the kept encodings, in place of shadows
		if err := c.delta.commit(st.bufs); err != nil {
			return err
		}
		shadows = nil
	}
	for i := range shadows {
		d := st.bufs[i].Dst
		k := keyOf(c.mem, d, i)
		if d == nil || d.Len() == 0 || done[k] {
			continue
		}
		done[k] = true
		all := strided.Desc{Run: d.Len()}
		if err := c.mem.Copy(d, all, st.in.Bufs[i].Dst, all); err != nil {
			return fmt.Errorf("refit: committing tensor %q: %w", c.specs[i].Name, err)
		}
	}
	if st.scales != nil {
		if err := c.deliverScales(c.mem, st.bufs, st.scales); err != nil {
			return err
		}
	}
	return c.mem.Sync()
}

// release frees what a step holds (scales, shadows); it may be called
// more than once.
func (st *step) release(mem transport.Memory) {
	if st == nil {
		return
	}
	if st.scales != nil {
		st.scales.free()
		st.scales = nil
	}
	freeAll(mem, st.shadows)
	st.shadows = nil
}

func freeAll(mem transport.Memory, bufs []transport.Buffer) {
	for _, b := range bufs {
		mem.Free(b)
	}
}

// wireTag is a call's identity on the wire in its step n: its number and
// the step's parity, in [1, transport.MaxTag].
func wireTag(number int, n uint64) int32 {
	const span = transport.MaxTag / 2
	return int32(1 + 2*((number-1)%span) + int(n%2))
}

// beginWord is what every rank says at the start of a step: its status,
// the call it begins, the step of that call, the step's version and
// whether it needs the step to be a full sync and whether it found every
// region it sends changed throughout (delta mode).
const beginWord = 26

// agreeBegin is the one collective before a step: every rank's status and
// identity (call number, step). Ranks that began different steps all
// return a *CallMismatchError naming both; a rank whose localErr is set
// makes every rank return its error, typed, in a *control.ValidationError. It
// returns whether any rank asked for a full sync (full) and whether every
// rank found what it sends changed throughout (dense).
func (rt *Runtime) agreeBegin(ctx context.Context, c *Call, n, version uint64, full, dense bool, localErr error) (bool, bool, error) {
	g := rt.g
	mine := make([]byte, beginWord)
	if localErr != nil {
		binary.LittleEndian.PutUint32(mine[0:], 1)
	}
	binary.LittleEndian.PutUint32(mine[4:], uint32(c.number))
	binary.LittleEndian.PutUint64(mine[8:], n)
	binary.LittleEndian.PutUint64(mine[16:], version)
	if full {
		mine[24] = 1
	}
	if dense {
		mine[25] = 1
	}
	all := make([]byte, beginWord*g.Size())
	if err := g.Allgather(ctx, mine, all); err != nil {
		return false, false, err
	}
	for r := 0; r < g.Size(); r++ {
		full = full || all[beginWord*r+24] != 0
		dense = dense && all[beginWord*r+25] != 0
	}
	at := func(r int) (status, number uint32, n uint64) {
		w := all[beginWord*r:]
		return binary.LittleEndian.Uint32(w), binary.LittleEndian.Uint32(w[4:]), binary.LittleEndian.Uint64(w[8:])
	}
	_, num0, n0 := at(0)
	var e *CallMismatchError
	failing := -1
	for r := 0; r < g.Size(); r++ {
		status, num, nr := at(r)
		if status != 0 && failing < 0 {
			failing = r
		}
		if num == num0 && nr == n0 {
			continue
		}
		if e == nil {
			e = &CallMismatchError{Rank: r, Call: rt.callName(int(num), r), Step: nr, Want: rt.callName(int(num0), 0), WantStep: n0}
		}
		e.Differing = append(e.Differing, r)
	}
	if e != nil {
		return full, dense, e
	}
	verr := versionMismatch(all, g.Size())
	if verr == nil {
		c.version = version // every rank began this version
	}
	if failing >= 0 {
		return full, dense, control.Spread(ctx, g, failing, localErr)
	}
	return full, dense, verr
}

// callName names the group's call number in a mismatch seen from rank r.
func (rt *Runtime) callName(number, r int) string {
	if c, ok := rt.open[number]; ok {
		return c.describe()
	}
	if number > rt.prepared {
		return fmt.Sprintf("call #%d (which this rank never prepared; rank %d did)", number, r)
	}
	return fmt.Sprintf("call #%d (closed on this rank)", number)
}
