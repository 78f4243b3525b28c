package reshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Collective is the control-plane collective a call agrees over: the
// ranks that take part, the same ones and in the same order as the
// transport's. Every rank must make the same collective calls in the same
// order. Implementations bound every call (package session's returns a
// *TimeoutError naming the ranks that never arrived).
type Collective interface {
	Rank() int
	Size() int
	// Allgather gathers len(send) bytes from every rank into recv, rank r's
	// at recv[r*len(send):].
	Allgather(ctx context.Context, send, recv []byte) error
	// Allgatherv gathers counts[r] bytes from rank r into recv at displs[r].
	Allgatherv(ctx context.Context, send, recv []byte, counts, displs []int64) error
}

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
	Views    TensorViews
	Scale    fp8.Mode
}

// Field is one named value every rank of a call must agree on.
type Field struct{ Name, Value string }

// CallOptions configure a call. Every rank must pass equal values; Prepare
// checks that they do.
type CallOptions struct {
	// Plan and Schedule are the planning and staging options.
	Plan     Options
	Schedule ScheduleOptions
	// CoalesceBytes: messages of one round between one pair of ranks that
	// are at most this large travel as one operation (see CompileOptions).
	CoalesceBytes int64
	// Verify checksums every message on both sides (CRC-32C) and compares
	// the sums across ranks before a run succeeds.
	Verify bool
	// Atomic makes destinations receive into shadow buffers and copy them
	// in only once every tensor of the call has arrived (and verified) on
	// every rank: if a run fails, every destination buffer still holds its
	// old values, bit for bit.
	Atomic bool
	// Agree lists more fields that must match across ranks (the session
	// adds its device, domain overrides, timeout, ...).
	Agree []Field
}

// Prepared is a call prepared on one rank: validated, planned, scheduled,
// compiled into this rank's Program, and agreed across ranks. Run moves
// the data of one step with that step's buffers, with no re-planning. A
// Prepared is immutable; run it from one goroutine at a time.
type Prepared struct {
	Specs    []Spec
	Plans    []*Plan
	Schedule *Schedule
	Program  *Program
	// Fingerprint hashes the schedule and topology every rank built and
	// agreed on.
	Fingerprint uint64
	Topology    Topology
	opts        CallOptions
	rank, world int
	needs       [][2]partNeed  // what this rank's buffers must be
	checked     []bufferKey    // the buffers the last good check saw
	quant       []*quantTensor // per spec, for the tensors converted to FP8 (nil: none converts)
}

// Prepare validates a call's specs on this rank, plans every tensor,
// schedules the route over topo, compiles this rank's program, and makes
// the ranks agree, in two small collectives:
//
//   - before scheduling, on everything they were given (layouts, names,
//     route, topology, options): a rank given something else makes every
//     rank fail at once with an *AgreementError naming the first rank and
//     field that differ, and a rank whose input does not validate makes
//     every rank fail with a *ValidationError carrying its typed error;
//   - after compiling, on a fingerprint of the schedule actually built (and
//     each rank's success): a rank that built another schedule is an
//     *AgreementError on field "schedule".
//
// maxInPlace is the transport's MaxInPlace. Every rank of coll must call
// Prepare with specs of the same names and layouts and an equal route;
// coll spans the ranks of the transport the call will run on.
func Prepare(ctx context.Context, coll Collective, specs []Spec, route Route, topo Topology, maxInPlace int64, opts CallOptions) (*Prepared, error) {
	rank, world := coll.Rank(), coll.Size()
	plans, localErr := validateSpecs(rank, world, specs, route, topo, opts)
	if err := agree(WithPhase(ctx, "agreement on the call's inputs"), coll, callFields(specs, world, route, topo, opts), localErr); err != nil {
		return nil, err
	}
	p := &Prepared{Specs: specs, Plans: plans, Topology: topo, opts: opts, rank: rank, world: world}
	if len(specs) == 0 {
		p.Schedule = &Schedule{Route: route.Name(), world: world}
		p.Program = &Program{Rank: rank, World: world, Route: route.Name(), sched: p.Schedule}
		return p, nil
	}
	names := make([]string, len(specs))
	views := make([]TensorViews, len(specs))
	for i, s := range specs {
		names[i], views[i] = s.Name, s.Views
	}
	sched, err := route.Schedule(plans, topo, opts.Schedule)
	if err == nil {
		sched.TensorNames = names
		p.Schedule = sched
		p.Fingerprint = ScheduleFingerprint(sched, topo, opts.CoalesceBytes)
		p.Program, err = Compile(sched, rank, CompileOptions{Views: views, MaxInPlace: maxInPlace, CoalesceBytes: opts.CoalesceBytes})
	}
	if err == nil {
		p.needs, err = partNeeds(sched, rank, views)
	}
	if err == nil {
		p.quant, err = prepareQuant(rank, specs)
	}
	if err != nil {
		err = fmt.Errorf("rank %d: route %s: %w", rank, route.Name(), err)
	}
	if err := agreeSchedule(WithPhase(ctx, "agreement on the schedule built"), coll, p.Fingerprint, err); err != nil {
		return nil, err
	}
	return p, nil
}

// validateSpecs checks this rank's inputs and plans every tensor. It
// returns the first problem as an error rather than failing, so that the
// agreement spreads it to every rank.
func validateSpecs(rank, world int, specs []Spec, route Route, topo Topology, opts CallOptions) ([]*Plan, error) {
	if route == nil {
		return nil, fmt.Errorf("rank %d: no route", rank)
	}
	if err := opts.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	if opts.CoalesceBytes < 0 {
		return nil, fmt.Errorf("rank %d: %w", rank, &FieldError{Field: "coalesce bytes", Got: fmt.Sprint(opts.CoalesceBytes), Why: "must not be negative"})
	}
	if topo.Domain != nil && len(topo.Domain) != world {
		return nil, fmt.Errorf("rank %d: topology names %d ranks, the communicator has %d", rank, len(topo.Domain), world)
	}
	seen := map[string]bool{}
	plans := make([]*Plan, len(specs))
	for i, s := range specs {
		if s.Name == "" || seen[s.Name] {
			return nil, fmt.Errorf("rank %d, tensor %d: name %q is empty or repeated", rank, i, s.Name)
		}
		seen[s.Name] = true
		p, err := NewPlan(s.Src, s.Dst, world, opts.Plan)
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
				return nil, &ViewError{Rank: rank, Tensor: s.Name, Side: sideName(side), View: v, Why: "is given but the rank holds no part on this side"}
			}
			if err := v.Validate(box.Shape()); err != nil {
				return nil, &ViewError{Rank: rank, Tensor: s.Name, Side: sideName(side), View: v, Why: err.Error()}
			}
		}
	}
	return plans, nil
}

// Report is what one run of a call did on this rank.
type Report struct {
	// Completed lists the tensors that reached every destination rank (and
	// verified, with Verify), in call order; Failed the others.
	Completed, Failed []string
	Stats             Stats
	// Seconds is how long the run took on this rank, from its buffer
	// check to its last agreement.
	Seconds float64
}

// Run moves one step's data: bufs holds this rank's buffers, one entry per
// spec, in spec order (nil for a side the rank does not hold; with a view,
// the larger buffer the view places the part in; several specs may share
// one buffer through views that do not overlap). It checks the buffers and
// agrees that every rank's are good before a byte moves (one small
// collective; a bad buffer anywhere is a *ValidationError wrapping a
// *BufferError on every rank), runs the program under ex (whose Transport
// must span coll's ranks; ex.Timeout bounds each round), then with Verify
// compares checksums, and agrees on which tensors completed.
//
// A transport failure or timeout ends the run at once and is returned as
// it is (*TimeoutError): the peers may be gone, so no collective follows,
// and the caller must abort the transport and every rank's wait (package
// session does both). Errors agreed by every rank: *ValidationError,
// *ChecksumError (Verify; with Atomic nothing changed anywhere).
func (p *Prepared) Run(ctx context.Context, ex *Executor, coll Collective, bufs []TensorBuffers) (*Report, error) {
	if coll.Rank() != p.rank || coll.Size() != p.world {
		return nil, fmt.Errorf("reshard: a call prepared on rank %d of %d run on rank %d of %d", p.rank, p.world, coll.Rank(), coll.Size())
	}
	start := time.Now()
	names := p.names()
	if err := p.Begin(ctx, ex.Mem, coll, bufs); err != nil {
		return nil, err
	}
	rep := &Report{}
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	if len(p.Specs) == 0 {
		return rep, nil
	}
	var scales *stepScales
	if p.quant != nil {
		// this step's scales, before any byte moves: a NaN anywhere fails
		// every rank here, every destination untouched.
		var err error
		if scales, err = p.exchangeAmax(ctx, ex.Mem, coll, bufs); err != nil {
			rep.Failed = names
			return rep, err
		}
		defer func() {
			scales.free()
			ex.Quant = nil
		}()
		ex.Quant = scales.exec
	}
	// Buffers: the destinations, or their shadows.
	run := make([]TensorBuffers, len(bufs))
	copy(run, bufs)
	var shadows []Buffer
	defer func() {
		for _, b := range shadows {
			ex.Mem.Free(b)
		}
	}()
	if p.opts.Atomic {
		// One shadow per distinct destination buffer; a buffer that
		// several parts share, or that a view places a part in, starts
		// as a copy, so that its bytes outside the parts commit unchanged.
		keys := make([]bufferKey, len(bufs))
		uses := map[bufferKey]int{}
		for i := range bufs {
			keys[i] = keyOf(ex.Mem, bufs[i].Dst, i)
			uses[keys[i]]++
			if !p.Specs[i].Views.Dst.Dense() {
				uses[keys[i]]++
			}
		}
		shadowOf := map[bufferKey]Buffer{}
		for i := range run {
			d := bufs[i].Dst
			if d == nil || d.Len() == 0 {
				continue
			}
			if sh, ok := shadowOf[keys[i]]; ok {
				run[i].Dst = sh
				continue
			}
			sh, err := ex.Mem.Alloc(d.Len())
			if err != nil {
				return nil, fmt.Errorf("reshard: shadow of tensor %q: %w", names[i], err)
			}
			shadows = append(shadows, sh)
			if uses[keys[i]] > 1 {
				all := strided.Desc{Run: d.Len()}
				if err := ex.Mem.Copy(sh, all, d, all); err != nil {
					return nil, fmt.Errorf("reshard: shadow of tensor %q: %w", names[i], err)
				}
			}
			shadowOf[keys[i]] = sh
			run[i].Dst = sh
		}
	}
	ex.Verify = p.opts.Verify
	st, err := ex.Run(ctx, p.Program, run)
	rep.Stats = st
	if err != nil {
		rep.Failed = names
		return rep, err
	}
	if scales != nil && !p.opts.Atomic {
		if err := p.deliverScales(ex.Mem, bufs, scales); err != nil {
			rep.Failed = names
			return rep, err
		}
	}
	failed := make([]byte, len(p.Specs))
	var firstErr error
	if p.opts.Verify {
		bad, err := compareSums(WithPhase(ctx, "checksum comparison"), coll, p.Schedule, st)
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
	allFailed, first, err := agreeStatus(WithPhase(ctx, "completion status of a step"), coll, failed, firstErr)
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
		if p.opts.Atomic {
			rep.Completed, rep.Failed = nil, names
		}
		return rep, first
	}
	if p.opts.Atomic {
		done := map[bufferKey]bool{}
		for i := range bufs {
			d := bufs[i].Dst
			k := keyOf(ex.Mem, d, i)
			if d == nil || d.Len() == 0 || done[k] {
				continue
			}
			done[k] = true
			all := strided.Desc{Run: d.Len()}
			if err := ex.Mem.Copy(d, all, run[i].Dst, all); err != nil {
				return rep, fmt.Errorf("reshard: committing tensor %q: %w", names[i], err)
			}
		}
		if scales != nil {
			if err := p.deliverScales(ex.Mem, bufs, scales); err != nil {
				return rep, err
			}
		}
		if err := ex.Mem.Sync(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Refuse takes part in one step of the call, in place of Run, for a rank
// that cannot run it because of what only it can tell about its own inputs
// (err: a buffer of another dtype or device, a non-contiguous tensor), so
// that every rank fails at the buffer check before a byte moves, with err,
// typed, in a *ValidationError, instead of waiting for this rank until the
// timeout. The other ranks call Run as usual; should several ranks fail,
// every rank returns the lowest one's error. A nil err refuses without a
// reason.
func (p *Prepared) Refuse(ctx context.Context, coll Collective, err error) error {
	if coll.Rank() != p.rank || coll.Size() != p.world {
		return fmt.Errorf("reshard: a call prepared on rank %d of %d refused on rank %d of %d", p.rank, p.world, coll.Rank(), coll.Size())
	}
	if err == nil {
		err = fmt.Errorf("rank %d refused the step", p.rank)
	}
	return agreeStatusWord(WithPhase(ctx, "buffer check before a step"), coll, "buffer check", err)
}

func (p *Prepared) names() []string {
	names := make([]string, len(p.Specs))
	for i, s := range p.Specs {
		names[i] = s.Name
	}
	return names
}

// Begin is the first half of Run, for a step whose data a device runner
// moves outside Run (package session's Call.Launch): it checks this rank's
// buffers for the step and agrees with every rank that every rank's are
// good, in one small collective (a bad buffer anywhere is a
// *ValidationError wrapping a *BufferError on every rank).
func (p *Prepared) Begin(ctx context.Context, mem Memory, coll Collective, bufs []TensorBuffers) error {
	if coll.Rank() != p.rank || coll.Size() != p.world {
		return fmt.Errorf("reshard: a call prepared on rank %d of %d run on rank %d of %d", p.rank, p.world, coll.Rank(), coll.Size())
	}
	localErr := p.checkRunBuffers(mem, bufs)
	return agreeStatusWord(WithPhase(ctx, "buffer check before a step"), coll, "buffer check", localErr)
}

// End is the second half of Run for a step begun with Begin and moved
// without Verify or Atomic: it agrees with every rank on the step's
// completion (the collective Run ends with) and reports every tensor
// completed, with st the runner's stats and start when the step began.
func (p *Prepared) End(ctx context.Context, coll Collective, st Stats, start time.Time) (*Report, error) {
	names := p.names()
	rep := &Report{Stats: st}
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	if len(p.Specs) == 0 {
		return rep, nil
	}
	allFailed, first, err := agreeStatus(WithPhase(ctx, "completion status of a step"), coll, make([]byte, len(p.Specs)), nil)
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
	return rep, first
}

// checkRunBuffers checks one step's buffers on this rank: sizes against
// the layouts and views, and no two parts' bytes in the same place. The
// aliasing check is skipped when the buffers are the ones the last good
// check saw (the common case: a trainer refits the same weights every
// step).
func (p *Prepared) checkRunBuffers(mem Memory, bufs []TensorBuffers) error {
	if err := checkBuffers(p.Schedule, p.rank, p.needs, bufs); err != nil {
		return err
	}
	if err := p.checkScaleBuffers(mem, bufs); err != nil {
		return err
	}
	keys := make([]bufferKey, 0, 3*len(bufs))
	known := true // every buffer's addresses are known
	for i := range bufs {
		for _, b := range []Buffer{bufs[i].Src, bufs[i].Dst, bufs[i].Scale} {
			k := keyOf(mem, b, i)
			known = known && k.spec < 0
			keys = append(keys, k)
		}
	}
	if known && slices.Equal(keys, p.checked) {
		return nil
	}
	if err := checkAliasing(mem, p.rank, p.Specs, p.needs, p.scaleNeeds(), bufs); err != nil {
		return err
	}
	if known {
		p.checked = keys
	}
	return nil
}

// checkAliasing fails when the bytes two parts of this rank occupy
// overlap: buffers that share memory, or views of one buffer that meet.
// Parts whose spans do not overlap are told apart by their spans alone;
// only overlapping spans (views into one fused buffer) are compared run
// by run.
func checkAliasing(mem Memory, rank int, specs []Spec, needs [][2]partNeed, scales []int64, bufs []TensorBuffers) error {
	ad, ok := mem.(Addresser)
	if !ok {
		return nil
	}
	type part struct {
		base, lo, hi uintptr
		at           strided.Desc
		what         string
	}
	var parts []part
	for i := range specs {
		for side, b := range []Buffer{bufs[i].Src, bufs[i].Dst} {
			n := needs[i][side]
			if b == nil || !n.in || n.at.Bytes() == 0 {
				continue
			}
			base, _, ok := ad.AddressRange(b)
			if !ok {
				continue
			}
			last := n.at.Offset
			for k, c := range n.at.Count {
				last += (c - 1) * n.at.Stride[k]
			}
			parts = append(parts, part{base: base, lo: base + uintptr(n.at.Offset), hi: base + uintptr(last+n.at.Run), at: n.at,
				what: fmt.Sprintf("the %s part of tensor %q", sideName(side), specs[i].Name)})
		}
		if i < len(scales) && scales[i] > 0 && bufs[i].Scale != nil {
			if base, _, ok := ad.AddressRange(bufs[i].Scale); ok {
				parts = append(parts, part{base: base, lo: base, hi: base + uintptr(scales[i]), at: strided.Desc{Run: scales[i]},
					what: fmt.Sprintf("the scales of tensor %q", specs[i].Name)})
			}
		}
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a].lo < parts[b].lo })
	type run struct {
		lo, hi uintptr
		what   string
	}
	for i := 0; i < len(parts); {
		// a group of parts whose spans overlap one another
		j, hi := i+1, parts[i].hi
		for j < len(parts) && parts[j].lo < hi {
			hi = max(hi, parts[j].hi)
			j++
		}
		if j-i > 1 {
			var runs []run
			for _, pt := range parts[i:j] {
				pt.at.ForEachRun(func(off int64) {
					runs = append(runs, run{pt.base + uintptr(off), pt.base + uintptr(off+pt.at.Run), pt.what})
				})
			}
			sort.Slice(runs, func(a, b int) bool { return runs[a].lo < runs[b].lo })
			for k := 1; k < len(runs); k++ {
				if runs[k].lo < runs[k-1].hi {
					return fmt.Errorf("rank %d: %s and %s overlap in memory; every part of a call must have bytes of its own",
						rank, runs[k-1].what, runs[k].what)
				}
			}
		}
		i = j
	}
	return nil
}

// scaleNeeds returns the size of every spec's scale buffer on this rank (0:
// none), or nil when no spec converts.
func (p *Prepared) scaleNeeds() []int64 {
	if p.quant == nil {
		return nil
	}
	out := make([]int64, len(p.quant))
	for i, q := range p.quant {
		if q != nil {
			out[i] = max(q.scaleBytes, 0)
		}
	}
	return out
}

// checkScaleBuffers checks every spec's TensorBuffers.Scale on this rank,
// and that the memory can quantize when a spec converts.
func (p *Prepared) checkScaleBuffers(mem Memory, bufs []TensorBuffers) error {
	for i := range bufs {
		b := bufs[i].Scale
		var q *quantTensor
		if p.quant != nil {
			q = p.quant[i]
		}
		name := p.Specs[i].Name
		switch {
		case (q == nil || q.scaleBytes < 0) && b != nil && b.Len() != 0:
			why := "is given but the tensor does not convert to FP8"
			if q != nil {
				why = "is given but the rank is not in the destination mesh"
			}
			return &BufferError{Rank: p.rank, Tensor: name, Side: "scale", Why: why, Want: 0, Got: b.Len()}
		case q == nil || q.scaleBytes <= 0:
		case b == nil:
			return &BufferError{Rank: p.rank, Tensor: name, Side: "scale", Why: "is missing (the tensor converts to FP8 and the rank is in the destination mesh)", Want: q.scaleBytes, Got: -1}
		case b.Len() < q.scaleBytes:
			return &BufferError{Rank: p.rank, Tensor: name, Side: "scale", Why: "is too short", Want: q.scaleBytes, Got: b.Len()}
		case b.Len() > q.scaleBytes:
			return &BufferError{Rank: p.rank, Tensor: name, Side: "scale", Why: "is too long", Want: q.scaleBytes, Got: b.Len()}
		}
	}
	if p.quant == nil {
		return nil
	}
	if _, ok := mem.(QuantMemory); !ok {
		return fmt.Errorf("rank %d: the call converts tensors to FP8, but memory %T cannot quantize (it is not a reshard.QuantMemory)", p.rank, mem)
	}
	if _, ok := mem.(HostIO); !ok {
		return fmt.Errorf("rank %d: the call converts tensors to FP8, but memory %T cannot write scales (it is not a reshard.HostIO)", p.rank, mem)
	}
	return nil
}

// bufferKey identifies a buffer: by its address range where the memory
// can tell (spec -1), else by the spec it was passed for; a nil buffer is
// noBuffer.
type bufferKey struct {
	lo, hi uintptr
	spec   int
}

var noBuffer = bufferKey{spec: -2}

func keyOf(mem Memory, b Buffer, spec int) bufferKey {
	if b == nil {
		return noBuffer
	}
	if ad, ok := mem.(Addresser); ok {
		if lo, hi, ok := ad.AddressRange(b); ok {
			return bufferKey{lo: lo, hi: hi, spec: -1}
		}
	}
	return bufferKey{spec: spec}
}

// ErrAborted matches every *AbortError with errors.Is.
var ErrAborted = errors.New("reshard: call aborted")

type phaseKey struct{}

// WithPhase names the collective phase ctx is used for ("agreement on the
// inputs", "completion status", ...), so that a Collective can say which
// one timed out.
func WithPhase(ctx context.Context, phase string) context.Context {
	return context.WithValue(ctx, phaseKey{}, phase)
}

// PhaseOf returns the phase WithPhase named, or "".
func PhaseOf(ctx context.Context) string {
	p, _ := ctx.Value(phaseKey{}).(string)
	return p
}
