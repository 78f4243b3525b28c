package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
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
	// FuseStreams is how many streams the step's first fused FP8 kernels
	// spread over (replay.Options.FuseStreams; 0: replay.DefaultFuseStreams).
	// A session passes M2N_FUSE_STREAMS, read at Join.
	FuseStreams int
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
	prog    *program.Program
	t       *nccl.Transport
	mem     *cudamem.Memory
	ctx     *cuda.Context
	opts    Options
	streams [replay.Streams]*cuda.Stream // by replay.Stream; the side streams are the replay's own

	allocated bool
	needs     replay.Needs
	staging   [2][2]cudamem.Buffer
	full      []cudamem.Buffer
	scratch   cudamem.Buffer
	events    []*cuda.Event
	ext       []*cuda.Event // graph: events recorded as graph nodes, for progress
	fin       *cuda.Event

	// quant[t] is tensor t's scale window, for a tensor converted to FP8
	// (the zero value for the others): the replay's own device memory,
	// at a fixed address the bound commands (and a graph) read, filled
	// every step from StepInput.Quant before the step is queued, or by
	// the step itself for a self-scaled tensor (see selfscale.go).
	quant      []replay.QuantTensor
	scaleArena cudamem.Buffer // the uploaded windows, one after another
	scaleBits  []byte         // the step's scales, uploaded at once
	self       selfScaling

	key      []uint64 // the bound buffers: address and length of each
	keyBuf   []uint64 // the key of a run's buffers, reused
	plan     *replay.Plan
	arena    cudamem.Buffer // the batches' item tables
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
// compute stream). Device memory, events and the side streams the step's
// plan names (its own) are made at the first run.
func NewReplay(p *program.Program, t *nccl.Transport, mem *cudamem.Memory, opts Options) (*Replay, error) {
	if t.Rank() != p.Rank || t.Size() != p.World {
		return nil, fmt.Errorf("gpu: replay of a program of rank %d of %d on a transport of rank %d of %d", p.Rank, p.World, t.Rank(), t.Size())
	}
	r := &Replay{prog: p, t: t, mem: mem, ctx: mem.Ctx, opts: opts}
	_, netS := t.Comm(reshard.LinkNetwork)
	_, localS := t.Comm(reshard.LinkLocal)
	r.streams[replay.Compute], r.streams[replay.Net], r.streams[replay.Local] = mem.Stream, netS, localS
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
// Tensors converted to FP8 are quantized while packed, with in.Quant's
// scales (uploaded to the replay's scale windows first), or for a tensor
// the replay scales itself (TensorQuant.Self) in one fused pass over each
// part, its destination scale tensor written and its scales checked on
// the device (a NaN or infinity lists the tensor in the Stats'
// NonFinite once the step has moved, scales.go). It ignores
// in.Verify (the runtime drives such calls from the host) and the tag
// (NCCL has none: the runtime agrees on the step first). After an error
// the caller must abort the transport.
func (r *Replay) Move(ctx context.Context, in refit.StepInput) (refit.Stats, error) {
	if err := r.bindStep(in); err != nil {
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
	return r.stepStats()
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
	if err := r.bindStep(in); err != nil {
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
	return r.stepStats()
}

// stepStats returns what the step that ended moved, with the tensors whose
// scales it found non-finite.
func (r *Replay) stepStats() (refit.Stats, error) {
	stats := r.plan.Stats
	var err error
	stats.NonFinite, err = r.checkScales()
	return stats, err
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
	errs = append(errs, r.unbind(), r.freeScales(), r.freeSelf())
	for _, e := range append(append(r.events, r.ext...), r.fin) {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	r.events, r.ext, r.fin = nil, nil, nil
	for _, b := range r.buffers() {
		errs = append(errs, r.ctx.Free(b.Ptr))
	}
	r.full, r.staging, r.scratch, r.allocated = nil, [2][2]cudamem.Buffer{}, cudamem.Buffer{}, false
	errs = append(errs, r.destroySides())
	return errors.Join(errs...)
}

// ensureSides creates the side streams plan names that the replay does
// not have yet (they stay until Close).
func (r *Replay) ensureSides(plan *replay.Plan) error {
	for _, c := range plan.Cmds {
		if c.Stream < replay.Side || r.streams[c.Stream] != nil {
			continue
		}
		s, err := r.ctx.NewStream()
		if err != nil {
			return err
		}
		r.streams[c.Stream] = s
	}
	return nil
}

// destroySides destroys the side streams, the replay's own.
func (r *Replay) destroySides() error {
	var errs []error
	for s := int(replay.Side); s < replay.Streams; s++ {
		if r.streams[s] != nil {
			errs = append(errs, r.streams[s].Destroy())
			r.streams[s] = nil
		}
	}
	return errors.Join(errs...)
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
		case replay.Quantize, replay.Fuse:
			q := &p.Quants[c.Quant]
			t := &p.Quant[q.Tensor]
			kernel := cuda.PackQuantize
			if c.Kind == replay.Fuse {
				kernel = cuda.FusedQuantize
			}
			err = kernel(s, t.Grid, cuda.DevicePtr(q.Dst),
				cuda.FP8Region{DType: t.DType, Src: cuda.DevicePtr(q.Src), At: q.SrcAt, Box: q.Box},
				cuda.FP8Window{Blocks: t.Blocks, Values: cuda.DevicePtr(t.Scales.Addr)})
		case replay.Check:
			err = queueCheck(s, c.Src, c.Len, c.Dst)
		case replay.Group:
			class := reshard.LinkNetwork
			if c.Stream == replay.Local {
				class = reshard.LinkLocal
			}
			comm, _ := r.t.Comm(class)
			err = comm.PostGroup(r.groups[i], s)
		}
		if err != nil {
			round := c.Round
			if c.Round < len(r.prog.Rounds) {
				round = r.prog.Rounds[c.Round].Index
			}
			return fmt.Errorf("gpu: rank %d, round %d: %s on the %s stream: %w", r.prog.Rank, round, c.Kind, c.Stream, err)
		}
	}
	return nil
}

var _ refit.Launcher = (*Replay)(nil)
