package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/pace"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Options configure a Replay.
type Options struct {
	// Timeout bounds each round: when the host waits and a round's
	// groups make no progress for this long, the wait fails with a
	// *reshard.TimeoutError naming the rank, the round and its peers (0:
	// no bound).
	Timeout time.Duration
	// Graph captures the step once per binding of buffers as a CUDA graph
	// (the NCCL groups included) and launches the graph every step,
	// instead of queuing every command every step. Where the capture
	// fails, the replay queues the commands instead (GraphError says why).
	Graph bool
	// Poll, if set, is called about every millisecond while the host
	// waits (a session polls its control plane with it: an abort notice
	// from a peer); its error ends the wait.
	Poll func() error
	// MemcpyMin is the size from which a contiguous local copy runs as a
	// device memcpy rather than as an item of a batched copy
	// (replay.DefaultMemcpyMin when 0; negative: never). With Graph, never:
	// see bind.
	MemcpyMin int64
}

// Replay runs a compiled program's whole step on the GPU's streams with no
// host wait between rounds: every round's packs, local copies and unpacks
// as batched-copy launches (one per round and kind, or per wave of copies
// that depend on one another) and large contiguous copies as memcpys on the
// compute stream (the Memory's), its sends and receives as one NCCL group
// per communicator on the transport's network and local streams, ordered by
// events; a round's copies that its sends do not read run on a side stream
// of the replay's own, beside the groups (double-buffered staging: a round's packs wait for the groups of
// the round two before, which used the same staging slot, and its receives
// for that round's unpacks; a round's forwarding sends read data received
// at least two rounds earlier). The host waits once, at the end (RunProgram),
// or not at all (Launch: the caller orders its own streams on the events).
//
// A Replay is prepared once per call and bound to the buffers of a step:
// the first run with given buffers builds the commands, uploads the item
// tables of the batched copies to the device and, with Graph, captures the
// step; later runs with the same buffers only launch. Its staging and
// scratch are its own. It is not safe for concurrent use.
type Replay struct {
	prog    *reshard.Program
	t       *nccl.Transport
	mem     *cuda.Memory
	ctx     *cuda.Context
	opts    Options
	streams [4]*cuda.Stream // by replay.Stream; the side stream is the replay's own

	allocated bool
	needs     replay.Needs
	staging   [2][2]cuda.Buffer
	full      []cuda.Buffer
	scratch   cuda.Buffer
	events    []*cuda.Event
	ext       []*cuda.Event // graph: events recorded as graph nodes, for progress
	fin       *cuda.Event

	key      []uint64 // the bound buffers: address and length of each
	keyBuf   []uint64 // the key of a run's buffers, reused
	plan     *replay.Plan
	arena    cuda.Buffer // the batches' item tables
	launches []cuda.BatchLaunch
	groups   []*nccl.GroupOps // by command index
	hasNCCL  bool
	graph    *cuda.Graph
	graphErr error
	inflight bool
	// launchProgress is the launched step's StepInput.Progress, for Wait.
	launchProgress func(bytes int64, tensors int)
}

// NewReplay prepares the replay of program p over transport t (whose
// communicators and streams it uses) with memory mem (whose stream is the
// compute stream), with a side stream of its own. Device memory and events
// are allocated at the first run.
func NewReplay(p *reshard.Program, t *nccl.Transport, mem *cuda.Memory, opts Options) (*Replay, error) {
	if t.Rank() != p.Rank || t.Size() != p.World {
		return nil, fmt.Errorf("gpu: replay of a program of rank %d of %d on a transport of rank %d of %d", p.Rank, p.World, t.Rank(), t.Size())
	}
	r := &Replay{prog: p, t: t, mem: mem, ctx: mem.Ctx, opts: opts}
	side, err := mem.Ctx.NewStream()
	if err != nil {
		return nil, err
	}
	_, netS := t.Comm(reshard.LinkNetwork)
	_, localS := t.Comm(reshard.LinkLocal)
	r.streams = [4]*cuda.Stream{replay.Compute: mem.Stream, replay.Net: netS, replay.Local: localS, replay.Side: side}
	r.needs = replay.NeedsOf(p)
	return r, nil
}

// SetGraph turns the CUDA graph on or off (Options.Graph) for the
// following runs; a change drops the bound step, waiting first for a step
// in flight.
func (r *Replay) SetGraph(on bool) error {
	if on == r.opts.Graph {
		return nil
	}
	r.opts.Graph = on
	if r.inflight {
		if err := r.streams[replay.Compute].Synchronize(); err != nil {
			return err
		}
		r.inflight = false
	}
	r.graphErr = nil
	return r.unbind()
}

// GraphError returns why the step could not be captured as a graph, with
// Graph set (nil when it was, or before the first run).
func (r *Replay) GraphError() error { return r.graphErr }

// Graphed reports whether the bound step runs as a CUDA graph.
func (r *Replay) Graphed() bool { return r.graph != nil }

// Name implements refit.Driver: "graph" with Options.Graph, else "replay".
func (r *Replay) Name() string {
	if r.opts.Graph {
		return string(refit.DriverGraph)
	}
	return string(refit.DriverReplay)
}

// Move implements refit.Driver: it binds in.Bufs (see Replay), queues the
// step and waits until it is done, polling the streams, the communicators'
// asynchronous errors, ctx and Poll, with each round bounded by Timeout.
// It ignores in.Verify and in.Quant (the runtime drives such calls from the
// host) and the tag (NCCL has none: the runtime agrees on the step first).
// After an error the caller must abort the transport.
func (r *Replay) Move(ctx context.Context, in refit.StepInput) (refit.Stats, error) {
	if err := r.bind(in.Bufs); err != nil {
		return refit.Stats{}, err
	}
	if err := r.enqueue(nil); err != nil {
		return refit.Stats{}, err
	}
	r.inflight = true
	if err := r.wait(ctx, r.streams[replay.Compute].Query); err != nil {
		return refit.Stats{}, err
	}
	r.inflight = false
	r.progress(in.Progress)
	return r.plan.Stats, nil
}

// progress reports a whole step moved.
func (r *Replay) progress(fn func(bytes int64, tensors int)) {
	if fn != nil {
		fn(r.prog.Moved())
	}
}

// Launch binds bufs and queues the step without waiting: it starts after
// the work that after marks (an event recorded on the caller's stream, the
// optimizer step that wrote the weights, say; nil: none) and the returned
// event marks its end (make the consumer's stream wait on it). The event is
// the Replay's: it is recorded again by the next Launch. Wait waits for it
// from the host, with the checks RunProgram makes. Launching again with
// other buffers first waits for the step in flight.
func (r *Replay) Launch(in refit.StepInput, after refit.Event) (refit.Event, error) {
	var wait *cuda.Event
	if after != nil {
		e, ok := after.(*cuda.Event)
		if !ok {
			return nil, fmt.Errorf("gpu: rank %d: Launch after a %T; the GPU replay orders on a *cuda.Event", r.prog.Rank, after)
		}
		wait = e
	}
	if err := r.bind(in.Bufs); err != nil {
		return nil, err
	}
	if r.fin == nil {
		e, err := r.ctx.NewEvent(false)
		if err != nil {
			return nil, err
		}
		r.fin = e
	}
	if err := r.enqueue(wait); err != nil {
		return nil, err
	}
	if err := r.fin.Record(r.streams[replay.Compute]); err != nil {
		return nil, err
	}
	r.inflight, r.launchProgress = true, in.Progress
	return r.fin, nil
}

// Wait waits for the step of the last Launch (see RunProgram for the
// checks and errors) and returns what it moved.
func (r *Replay) Wait(ctx context.Context) (refit.Stats, error) {
	if r.fin == nil || r.plan == nil {
		return refit.Stats{}, errors.New("gpu: Replay.Wait before a Launch")
	}
	if err := r.wait(ctx, r.fin.Query); err != nil {
		return refit.Stats{}, err
	}
	r.inflight = false
	r.progress(r.launchProgress)
	return r.plan.Stats, nil
}

// Close frees what the replay allocated. With a step still in flight (a run
// that failed) it frees nothing a stream might still touch.
func (r *Replay) Close() error {
	if r.inflight {
		if done, err := r.streams[replay.Compute].Query(); err != nil || !done {
			return nil
		}
	}
	var errs []error
	errs = append(errs, r.unbind())
	for _, e := range append(append(r.events, r.ext...), r.fin) {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	r.events, r.ext, r.fin = nil, nil, nil
	for _, b := range r.buffers() {
		errs = append(errs, r.ctx.Free(b.Ptr))
	}
	r.full, r.staging, r.scratch, r.allocated = nil, [2][2]cuda.Buffer{}, cuda.Buffer{}, false
	errs = append(errs, r.streams[replay.Side].Destroy())
	return errors.Join(errs...)
}

func (r *Replay) buffers() []cuda.Buffer {
	out := append([]cuda.Buffer{r.scratch}, r.full...)
	for _, s := range r.staging {
		out = append(out, s[:]...)
	}
	return out
}

// unbind drops the bound step: the graph and the item tables.
func (r *Replay) unbind() error {
	var errs []error
	if r.graph != nil {
		errs = append(errs, r.graph.Destroy())
		r.graph = nil
	}
	if r.arena.Ptr != 0 {
		errs = append(errs, r.ctx.Free(r.arena.Ptr))
		r.arena = cuda.Buffer{}
	}
	r.plan, r.key, r.launches, r.groups = nil, nil, nil, nil
	return errors.Join(errs...)
}

func (r *Replay) alloc(n int64) (cuda.Buffer, error) {
	if n <= 0 {
		return cuda.Buffer{}, nil
	}
	p, err := r.ctx.Alloc(int(n))
	if err != nil {
		return cuda.Buffer{}, fmt.Errorf("gpu: rank %d: replay memory of %d bytes: %w", r.prog.Rank, n, err)
	}
	return cuda.Buffer{Ptr: p, N: n}, nil
}

// allocate makes the staging and scratch the program needs.
func (r *Replay) allocate() error {
	var err error
	for slot := range r.staging {
		for dir := range r.staging[slot] {
			if r.staging[slot][dir], err = r.alloc(r.needs.Staging[slot][dir]); err != nil {
				return err
			}
		}
	}
	r.full = make([]cuda.Buffer, len(r.needs.Full))
	for t, n := range r.needs.Full {
		if r.full[t], err = r.alloc(n); err != nil {
			return err
		}
	}
	if r.scratch, err = r.alloc(r.needs.Scratch); err != nil {
		return err
	}
	r.allocated = true
	return nil
}

func span(b cuda.Buffer) replay.Span { return replay.Span{Addr: uint64(b.Ptr), Len: b.N} }

// keyOf returns the addresses and lengths of bufs, checking that they are
// device memory.
func (r *Replay) keyOf(bufs []refit.TensorBuffers) ([]uint64, error) {
	if len(bufs) != len(r.prog.Full) {
		return nil, fmt.Errorf("gpu: rank %d: %d buffer pairs for a program of %d tensors", r.prog.Rank, len(bufs), len(r.prog.Full))
	}
	key := r.keyBuf[:0]
	for i := range bufs {
		for side, b := range []transport.Buffer{bufs[i].Src, bufs[i].Dst} {
			if b == nil {
				key = append(key, 0, 0)
				continue
			}
			d, ok := b.(cuda.Buffer)
			if !ok {
				return nil, fmt.Errorf("gpu: rank %d, tensor %d: %s buffer %T is not device memory", r.prog.Rank, i, [...]string{"source", "destination"}[side], b)
			}
			key = append(key, uint64(d.Ptr), uint64(d.N))
		}
	}
	r.keyBuf = key
	return key, nil
}

// bind builds the step for bufs unless it is bound to them already.
func (r *Replay) bind(bufs []refit.TensorBuffers) error {
	key, err := r.keyOf(bufs)
	if err != nil {
		return err
	}
	if r.plan != nil && slices.Equal(key, r.key) {
		return nil
	}
	if r.inflight {
		// the bound step's tables and graph may still be in use.
		if err := r.streams[replay.Compute].Synchronize(); err != nil {
			return err
		}
		r.inflight = false
	}
	if err := r.unbind(); err != nil {
		return err
	}
	if !r.allocated {
		if err := r.allocate(); err != nil {
			return err
		}
	}
	b := replay.Buffers{Tensors: make([][2]replay.Span, len(bufs)), Scratch: span(r.scratch)}
	for i := range bufs {
		b.Tensors[i] = [2]replay.Span{{Addr: key[4*i], Len: int64(key[4*i+1])}, {Addr: key[4*i+2], Len: int64(key[4*i+3])}}
	}
	for _, f := range r.full {
		b.Full = append(b.Full, span(f))
	}
	for slot := range r.staging {
		for dir := range r.staging[slot] {
			b.Staging[slot][dir] = span(r.staging[slot][dir])
		}
	}
	topo, rank := r.t.Topology(), r.t.Rank()
	memcpyMin := r.opts.MemcpyMin
	if r.opts.Graph {
		// a memcpy captured as a graph node ran at 65% of the same memcpy on
		// a stream (7 GiB on an H200, bench/results/h200-replay-bench.txt);
		// in a graph every copy goes through the batched kernel.
		memcpyMin = -1
	}
	plan, err := replay.Build(r.prog, b, replay.Options{
		Class:     func(peer int) reshard.LinkClass { return topo.Class(rank, peer) },
		MemcpyMin: memcpyMin,
	})
	if err != nil {
		return err
	}
	if err := r.tables(plan); err != nil {
		_ = r.unbind()
		return err
	}
	r.groups = make([]*nccl.GroupOps, len(plan.Cmds))
	r.hasNCCL = false
	for i, c := range plan.Cmds {
		if c.Kind != replay.Group {
			continue
		}
		ops := make([]nccl.P2P, len(c.Ops))
		for k, o := range c.Ops {
			ops[k] = nccl.P2P{Peer: o.Peer, Send: o.Send, Ptr: cuda.DevicePtr(o.Addr), Bytes: o.Len}
		}
		r.groups[i] = nccl.NewGroupOps(ops)
		r.hasNCCL = true
	}
	for len(r.events) < plan.Events {
		e, err := r.ctx.NewEvent(false)
		if err != nil {
			_ = r.unbind()
			return err
		}
		r.events = append(r.events, e)
	}
	r.plan, r.key = plan, slices.Clone(key)
	if r.opts.Graph {
		r.graphErr = r.capture()
	}
	return nil
}

// batchCopies turns a batch's items into the cuda package's copies.
func batchCopies(items []replay.Copy) []cuda.BatchCopy {
	out := make([]cuda.BatchCopy, len(items))
	for i, c := range items {
		out[i] = cuda.BatchCopy{
			Dst: cuda.DevicePtr(c.Dst), DstDesc: c.DstAt,
			Src: cuda.DevicePtr(c.Src), SrcDesc: c.SrcAt,
		}
	}
	return out
}

// tables plans every batch and uploads their item tables, one after
// another, to one device buffer.
func (r *Replay) tables(plan *replay.Plan) error {
	var all []byte
	type at struct {
		off    int
		count  int
		blocks uint64
	}
	where := make([]at, len(plan.Batches))
	for k, items := range plan.Batches {
		b, err := cuda.PlanBatch(batchCopies(items))
		if err != nil {
			return fmt.Errorf("gpu: rank %d: batch %d: %w", r.prog.Rank, k, err)
		}
		table, blocks, err := r.ctx.BatchTable(b)
		if err != nil {
			return err
		}
		where[k] = at{off: len(all), count: b.Len(), blocks: blocks}
		all = append(all, table...)
	}
	r.launches = make([]cuda.BatchLaunch, len(plan.Batches))
	if len(all) == 0 {
		return nil
	}
	buf, err := r.alloc(int64(len(all)))
	if err != nil {
		return err
	}
	r.arena = buf
	if err := r.ctx.CopyHtoD(buf.Ptr, all); err != nil {
		return err
	}
	for k, w := range where {
		r.launches[k] = cuda.BatchLaunch{Table: buf.Ptr + cuda.DevicePtr(w.off), Count: w.count, Blocks: w.blocks}
	}
	return nil
}

// capture records the bound step as a graph; on failure the step runs
// from its commands.
func (r *Replay) capture() error {
	if len(r.ext) < len(r.events) {
		for len(r.ext) < len(r.events) {
			e, err := r.ctx.NewEvent(false)
			if err != nil {
				return err
			}
			r.ext = append(r.ext, e)
		}
	}
	cs := r.streams[replay.Compute]
	capt, err := cs.BeginCapture()
	if err != nil {
		return err
	}
	if err := r.issue(true); err != nil {
		return errors.Join(err, capt.Abandon())
	}
	g, err := capt.End()
	if err != nil {
		return err
	}
	r.graph = g
	return nil
}

// enqueue queues the bound step after the event after (nil: none).
func (r *Replay) enqueue(after *cuda.Event) error {
	cs := r.streams[replay.Compute]
	if after != nil {
		if err := cs.WaitEvent(after); err != nil {
			return err
		}
	}
	if r.graph != nil {
		return r.graph.Launch(cs)
	}
	return r.issue(false)
}

// issue queues the bound step's commands; in a capture, each group's done
// event is also recorded as a graph node for progress.
func (r *Replay) issue(capturing bool) error {
	p := r.plan
	for i := range p.Cmds {
		c := &p.Cmds[i]
		s := r.streams[c.Stream]
		var err error
		switch c.Kind {
		case replay.Wait:
			err = s.WaitEvent(r.events[c.Event])
		case replay.Record:
			err = r.events[c.Event].Record(s)
			if err == nil && capturing && (c.Stream == replay.Net || c.Stream == replay.Local) {
				err = r.ext[c.Event].RecordExternal(s)
			}
		case replay.Batch:
			err = r.launches[c.Batch].Launch(s)
		case replay.Memcpy:
			err = s.CopyDtoD(cuda.DevicePtr(c.Dst), cuda.DevicePtr(c.Src), int(c.Len))
		case replay.Group:
			class := reshard.LinkNetwork
			if c.Stream == replay.Local {
				class = reshard.LinkLocal
			}
			comm, _ := r.t.Comm(class)
			err = comm.PostGroup(r.groups[i], s)
		}
		if err != nil {
			return fmt.Errorf("gpu: rank %d, round %d: %s on the %s stream: %w", r.prog.Rank, r.prog.Rounds[c.Round].Index, c.Kind, c.Stream, err)
		}
	}
	return nil
}

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
	return &refit.TimeoutError{Rank: r.prog.Rank, Round: r.prog.Rounds[i].Index, After: r.opts.Timeout,
		Peers: r.prog.PeersOf(i), Tensors: r.prog.TensorsOf(i)}
}

var _ refit.Launcher = (*Replay)(nil)
