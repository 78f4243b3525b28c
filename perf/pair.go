package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
	"github.com/rs/zerolog"
)

// Agreed marks an error every rank of a session returns alike (a failed
// check, an atomic call that failed everywhere), so that a program prints
// it once.
type Agreed struct{ Err error }

func (e Agreed) Error() string { return e.Err.Error() }
func (e Agreed) Unwrap() error { return e.Err }

// PairConfig describes one tensor's reshard between two layouts of one
// session's communicator.
type PairConfig struct {
	// Src and Dst are the layouts; Seed numbers the tensor's test pattern
	// (and Name, "tensor<Seed>" by default, names it in errors).
	Src, Dst placement.Layout
	Seed     uint64
	Name     string
	// Scale is the FP8 scaling of a destination in FP8 converted from a
	// bf16 or f32 source (ignored where the dtypes do not convert).
	Scale fp8.Mode
	// Stripe stripes the plan's sends over source replicas.
	Stripe bool
	// ExtraBuffers is what the program allocates beside the pair's
	// buffers (its own measurements), for the memory check.
	ExtraBuffers int64
	// WorldRank is this process's rank in the job, which check failures
	// name (a pipeline stage's ranks are local to its communicator).
	WorldRank int
	Faults    Faults
	Log       zerolog.Logger
}

// Faults are test-only faults a pair injects, to prove that the checks
// catch them: a NaN at source element NaN (>= 0), a destination buffer a
// byte short, a destination byte flipped before the check (Corrupt >= 0).
type Faults struct {
	NaN      int64
	ShortDst bool
	Corrupt  int
}

// NoFaults injects none.
var NoFaults = Faults{NaN: -1, Corrupt: -1}

// Pair is one tensor's buffers on one session (the world's, or a pipeline
// stage's): the source filled with the tensor's pattern, the destination
// (and its FP8 scales) poisoned and checked element by element.
type Pair struct {
	s         *session.Session
	cfg       PairConfig
	scale     fp8.Mode
	plan      *reshard.Plan
	srcBuf    transport.Buffer
	dstBuf    transport.Buffer
	dstHost   []byte // host copy of the destination, for poison and checks
	scaleBuf  transport.Buffer
	scaleHost []byte
	// updates applied to the source in delta mode (change), each of
	// fraction frac of the elements
	updates uint64
	frac    float64
}

// NewPair checks the pair's memory on every rank (session.CheckMemory),
// plans it, and allocates this rank's buffers, filling the source (by
// inSteps); every rank learns whether any could not. Every rank of s
// calls it with the same layouts.
func NewPair(s *session.Session, cfg PairConfig) (*Pair, error) {
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("tensor%d", cfg.Seed)
	}
	p := &Pair{s: s, cfg: cfg}
	if reshard.ConvertsTo(cfg.Src.DType(), cfg.Dst.DType()) {
		p.scale = cfg.Scale
	}
	if err := p.checkMemory(); err != nil {
		return nil, err
	}
	plan, localErr := reshard.NewPlan(cfg.Src, cfg.Dst, s.Size(), reshard.Options{StripeReplicas: cfg.Stripe})
	p.plan = plan
	if localErr == nil {
		localErr = inSteps(s, "buffer set-up (filling the sources)", p.allocate)
		var ab *control.AbortError
		if errors.As(localErr, &ab) {
			p.Close()
			return nil, localErr
		}
	}
	if err := s.Agree(context.Background(), nil, localErr); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// checkMemory makes every rank compare what it is about to allocate for
// the pair with the memory it has, before anything is allocated
// (session.CheckMemory): its buffers and their host copies, the atomic
// shadow, the staging bound, the pair's plan and each call's
// (reshard.PlanSize) and the schedule's estimate. A 1 TiB tensor on a few
// ranks fails here on every rank with the numbers, instead of dying in
// makeslice or being killed by the kernel. Prepare then checks what the
// library allocates itself (the compiled program's staging and scratch).
func (p *Pair) checkMemory() error {
	s, rank := p.s, p.s.Rank()
	fp := s.CallFootprint(p.specs())
	fp.Plan = checked.SatSum(fp.Plan, fp.Plan) // the pair's own plan, beside the call's
	if p.cfg.Src.Mesh().Contains(rank) {
		n := p.cfg.Src.LocalBytes(rank)
		fp.Buffers, fp.HostCopies = checked.SatSum(fp.Buffers, n), checked.SatSum(fp.HostCopies, n)
	}
	if p.cfg.Dst.Mesh().Contains(rank) {
		n := p.cfg.Dst.LocalBytes(rank)
		fp.Buffers, fp.HostCopies = checked.SatSum(fp.Buffers, n), checked.SatSum(fp.HostCopies, n)
		if s.Options().Atomic {
			fp.Staging = checked.SatSum(fp.Staging, n)
		}
	}
	fp.Buffers = checked.SatSum(fp.Buffers, p.cfg.ExtraBuffers)
	return s.CheckMemory(control.WithPhase(context.Background(), "memory check before the buffers"), fp)
}

// allocate makes this rank's buffers, the source filled.
func (p *Pair) allocate() error {
	mem, rank, src, dst := p.s.Memory(), p.s.Rank(), p.cfg.Src, p.cfg.Dst
	if src.Mesh().Contains(rank) {
		host := make([]byte, src.LocalBytes(rank))
		fill := pattern.Fill
		if p.scale != 0 {
			fill = pattern.FillFloats // finite values: the quantizer refuses NaNs
		}
		if err := fill(src, rank, p.cfg.Seed, host, placement.View{}); err != nil {
			return err
		}
		if p.cfg.Faults.NaN >= 0 {
			if err := setNaN(src, host, p.cfg.Faults.NaN); err != nil {
				return err
			}
		}
		b, err := mem.Alloc(int64(len(host)))
		if err != nil {
			return fmt.Errorf("rank %d: source buffer of %d bytes: %w", rank, len(host), err)
		}
		p.srcBuf = b
		if err := mem.Upload(b, host); err != nil {
			return err
		}
	}
	if !dst.Mesh().Contains(rank) {
		return nil
	}
	p.dstHost = make([]byte, dst.LocalBytes(rank))
	n := int64(len(p.dstHost))
	if p.cfg.Faults.ShortDst && n > 0 {
		n-- // a destination buffer one byte short, which validation must catch
	}
	b, err := mem.Alloc(n)
	if err != nil {
		return fmt.Errorf("rank %d: destination buffer of %d bytes: %w", rank, n, err)
	}
	p.dstBuf = b
	if p.scale != 0 {
		n, err := p.specs()[0].ScaleBytes(rank)
		if err != nil {
			return err
		}
		p.scaleHost = make([]byte, n)
		if p.scaleBuf, err = mem.Alloc(n); err != nil {
			return fmt.Errorf("rank %d: scale buffer of %d bytes: %w", rank, n, err)
		}
	}
	return nil
}

// setNaN makes local element i of a source part (host bytes of layout l)
// a NaN (Faults.NaN).
func setNaN(l placement.Layout, host []byte, i int64) error {
	e := l.ElemSize()
	if (i+1)*e > int64(len(host)) {
		return fmt.Errorf("M2N_FAULT_NAN: element %d is outside a part of %d elements", i, int64(len(host))/e)
	}
	switch l.DType() {
	case dtype.BF16:
		binary.LittleEndian.PutUint16(host[i*e:], 0x7FC0)
	case dtype.F32:
		binary.LittleEndian.PutUint32(host[i*e:], 0x7FC00000)
	default:
		return fmt.Errorf("M2N_FAULT_NAN: a %v tensor has no NaN", l.DType())
	}
	return nil
}

// Close frees the pair's buffers.
func (p *Pair) Close() {
	mem := p.s.Memory()
	for _, b := range []transport.Buffer{p.srcBuf, p.dstBuf, p.scaleBuf} {
		if b != nil {
			mem.Free(b)
		}
	}
}

// Plan returns the pair's plan.
func (p *Pair) Plan() *reshard.Plan { return p.plan }

// specs returns the pair as the one spec of a call.
func (p *Pair) specs() []refit.Spec {
	return []refit.Spec{{Name: p.cfg.Name, Src: p.cfg.Src, Dst: p.cfg.Dst, Scale: p.scale}}
}

// buffers returns this rank's buffers for a call of Specs.
func (p *Pair) buffers() []refit.TensorBuffers {
	return []refit.TensorBuffers{{Src: p.srcBuf, Dst: p.dstBuf, Scale: p.scaleBuf}}
}

// poison fills this rank's destination and scale tensor with the poison.
func (p *Pair) poison() error {
	if p.dstHost == nil {
		return nil
	}
	mem := p.s.Memory()
	fillBytes(p.dstHost, pattern.Poison)
	if err := mem.Upload(p.dstBuf, p.dstHost[:p.dstBuf.Len()]); err != nil {
		return err
	}
	if len(p.scaleHost) > 0 {
		fillBytes(p.scaleHost, pattern.Poison)
		return mem.Upload(p.scaleBuf, p.scaleHost)
	}
	return nil
}

// fillBytes sets every byte of b to v, copying in doubling runs.
func fillBytes(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// check compares every element of this rank's destination (and its FP8
// scales) with the pattern, and returns the first wrong one's message
// naming the world rank, with when ("iteration 3") appended; "" when
// every element is right or the rank holds no destination. The error is
// for a check that could not run.
func (p *Pair) check(when string) (string, error) {
	if p.dstHost == nil {
		return "", nil
	}
	mem := p.s.Memory()
	if err := mem.Download(p.dstHost, p.dstBuf); err != nil {
		return "", err
	}
	if b := p.cfg.Faults.Corrupt; b >= 0 && b < len(p.dstHost) {
		p.dstHost[b] ^= 0x40 // prove that the check catches a wrong byte
	}
	var err error
	if p.scale != 0 { // FP8 in flight: the values within the scales' rounding
		if len(p.scaleHost) > 0 {
			if err := mem.Download(p.scaleHost, p.scaleBuf); err != nil {
				return "", err
			}
		}
		err = pattern.CheckFP8Changed(p.cfg.Src.DType(), p.cfg.Dst, p.scale, p.s.Rank(), p.cfg.Seed, p.updates, p.frac, p.dstHost, placement.View{}, p.scaleHost)
	} else {
		err = pattern.CheckChanged(p.cfg.Dst, p.s.Rank(), p.cfg.Seed, p.updates, p.frac, p.dstHost, placement.View{})
	}
	if err == nil {
		return "", nil
	}
	nameWorldRank(err, "", p.cfg.WorldRank)
	p.cfg.Log.Error().Err(err).Str("when", when).Msg("check failed")
	return fmt.Sprintf("%v, in %s", err, when), nil
}

// nameWorldRank makes a check's error name the world rank (and the
// tensor, when given).
func nameWorldRank(err error, tensor string, rank int) {
	switch e := err.(type) {
	case *pattern.MismatchError:
		e.Rank = rank
		if tensor != "" {
			e.Tensor = tensor
		}
	case *pattern.ScaleMismatchError:
		e.Rank = rank
		if tensor != "" {
			e.Tensor = tensor
		}
	}
}

// checkUntouched runs after an atomic call failed on every rank: each
// destination compares its buffer with what it held before the call (the
// poison), and the Agreed error says whether every destination is
// untouched, as the atomic mode promises.
func (p *Pair) checkUntouched(callErr error) error {
	if aborted, _ := p.s.Aborted(); aborted {
		return callErr
	}
	changed := int64(0)
	if p.dstHost != nil {
		now := make([]byte, p.dstBuf.Len())
		if err := p.s.Memory().Download(now, p.dstBuf); err != nil {
			return fmt.Errorf("%w; %v", callErr, err)
		}
		if len(p.scaleHost) > 0 {
			sc := make([]byte, len(p.scaleHost))
			if err := p.s.Memory().Download(sc, p.scaleBuf); err != nil {
				return fmt.Errorf("%w; %v", callErr, err)
			}
			now = append(now, sc...)
		}
		for _, b := range now {
			if b != pattern.Poison {
				changed = 1
				break
			}
		}
	}
	all, err := gather(p.s, "report gathering", []int64{changed})
	if err != nil {
		return fmt.Errorf("%w; %v", callErr, err)
	}
	for r, v := range all {
		if v != 0 {
			return Agreed{fmt.Errorf("%w; atomic mode broken: rank %d's destination changed although the call failed", callErr, r)}
		}
	}
	return Agreed{fmt.Errorf("%w; atomic: every destination still holds its previous bytes", callErr)}
}
