package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// pairRun is one layout pair on one session of the job (the world's, or a
// pipeline stage's): the tensor's buffers, filled and checked with the
// pattern of tensor seed, and the routes measured on it.
type pairRun struct {
	j       *job
	s       *session.Session
	name    string // the tensor's name in errors
	seed    uint64 // the tensor's pattern
	src     placement.Layout
	dst     placement.Layout
	plan    *reshard.Plan
	fabric  hier.Fabric
	srcBuf  transport.Buffer
	dstBuf  transport.Buffer
	dstHost []byte // host copy of the destination buffer, for poison and checks
	members []int  // the world ranks of s's ranks (nil: s is the world's)
	// scale is the FP8 scaling mode when the tensor converts (--dst-dtype
	// e4m3); the destination's scale tensor is then scaleBuf, scaleHost
	// its host copy.
	scale     fp8.Mode
	scaleBuf  transport.Buffer
	scaleHost []byte
}

// newPairRun allocates a layout pair's buffers on s, the source filled
// with the pattern of tensor seed.
func (j *job) newPairRun(s *session.Session, src, dst placement.Layout, seed uint64) (*pairRun, error) {
	p := &pairRun{j: j, s: s, name: fmt.Sprintf("tensor%d", seed), seed: seed, src: src, dst: dst, fabric: j.set.fabric}
	if reshard.ConvertsTo(src.DType(), dst.DType()) {
		p.scale = j.set.fp8
	}
	rank := s.Rank()
	if err := p.checkMemory(); err != nil {
		return nil, err
	}
	var localErr error
	plan, err := reshard.NewPlan(src, dst, s.Size(), reshard.Options{StripeReplicas: j.set.opts.Stripe})
	if err != nil {
		localErr = usageError{err}
	}
	p.plan = plan
	if localErr == nil {
		localErr = inSteps(s, "buffer set-up (filling the sources)", func() error { return p.allocate(rank) })
		if ab := (*refit.AbortError)(nil); errors.As(localErr, &ab) {
			p.close()
			return nil, localErr
		}
	}
	// every rank learns whether any could not set its buffers up.
	if err := s.Agree(context.Background(), nil, localErr); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// allocate makes this rank's buffers; a destination is poisoned at every
// iteration that checks.
func (p *pairRun) allocate(rank int) error {
	mem := p.s.Memory()
	if p.src.Mesh().Contains(rank) {
		host := make([]byte, p.src.LocalBytes(rank))
		fill := pattern.Fill
		if p.scale != 0 {
			fill = pattern.FillFloats // finite values: the quantizer refuses NaNs
		}
		if err := fill(p.src, rank, p.seed, host, placement.View{}); err != nil {
			return err
		}
		if i, nan, _ := faultAt("M2N_FAULT_NAN", jobRank); nan {
			if err := setNaN(p.src, host, int64(i)); err != nil {
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
	if p.dst.Mesh().Contains(rank) {
		p.dstHost = make([]byte, p.dst.LocalBytes(rank))
		n := int64(len(p.dstHost))
		if _, short, _ := faultAt("M2N_FAULT_SHORT_DST", jobRank); short && n > 0 {
			n-- // test-only: a destination buffer one byte short, which validation must catch
		}
		b, err := mem.Alloc(n)
		if err != nil {
			return fmt.Errorf("rank %d: destination buffer of %d bytes: %w", rank, n, err)
		}
		p.dstBuf = b
		if p.scale != 0 {
			n, err := p.spec().ScaleBytes(rank)
			if err != nil {
				return err
			}
			p.scaleHost = make([]byte, n)
			if p.scaleBuf, err = mem.Alloc(n); err != nil {
				return fmt.Errorf("rank %d: scale buffer of %d bytes: %w", rank, n, err)
			}
		}
	}
	return nil
}

// setNaN makes local element i of a source part (host bytes of layout l)
// a NaN: the test-only M2N_FAULT_NAN.
func setNaN(l placement.Layout, host []byte, i int64) error {
	e := l.ElemSize()
	if i < 0 || (i+1)*e > int64(len(host)) {
		return usageError{fmt.Errorf("M2N_FAULT_NAN: element %d is outside a part of %d elements", i, int64(len(host))/e)}
	}
	switch l.DType() {
	case placement.BF16:
		binary.LittleEndian.PutUint16(host[i*e:], 0x7FC0)
	case placement.F32:
		binary.LittleEndian.PutUint32(host[i*e:], 0x7FC00000)
	default:
		return usageError{fmt.Errorf("M2N_FAULT_NAN: a %v tensor has no NaN", l.DType())}
	}
	return nil
}

// close frees the pair's buffers.
func (p *pairRun) close() {
	mem := p.s.Memory()
	for _, b := range []transport.Buffer{p.srcBuf, p.dstBuf, p.scaleBuf} {
		if b != nil {
			mem.Free(b)
		}
	}
}

func (p *pairRun) spec() refit.Spec {
	return refit.Spec{Name: p.name, Src: p.src, Dst: p.dst, Scale: p.scale}
}

func (p *pairRun) specs() []refit.Spec { return []refit.Spec{p.spec()} }

func (p *pairRun) buffers() []refit.TensorBuffers {
	return []refit.TensorBuffers{{Src: p.srcBuf, Dst: p.dstBuf, Scale: p.scaleBuf}}
}

// runRoutes prepares and measures every route of the flags, and returns
// the report (rank 0's copy holds every rank's traffic).
func (p *pairRun) runRoutes(f *runFlags) (*runReport, error) {
	j, s := p.j, p.s
	opts := s.Options()
	names, _ := f.routes()
	rep := &runReport{World: s.Size(), Source: p.src.String(), Destination: p.dst.String(), Bytes: p.src.Bytes(),
		Fingerprint: fmt.Sprintf("%016x", p.plan.Fingerprint()), ChunkBytes: opts.ChunkBytes,
		Staging: opts.StagingBytes, EmulatedBW: opts.EmulateNetBW, FabricGiven: j.set.fabricGiven}
	if p.scale != 0 {
		rep.FP8Scale = map[fp8.Mode]string{fp8.Block: "128x128 block", fp8.Row: "row", fp8.Tensor: "matrix"}[p.scale]
	}
	if j.set.measure {
		// the model's local bandwidth, measured over the transport the
		// calls run on.
		call, err := s.Prepare(context.Background(), p.specs(), reshard.Flat{})
		if err != nil {
			return nil, err
		}
		p.fabric.LocalBW, err = p.measureLocal(call)
		call.Close()
		if err != nil {
			return nil, err
		}
	}
	rep.Fabric = p.fabric
	stopHere("prepare")
	for _, name := range names {
		route, err := routespec.Parse(name, j.set.routeOpts(p.fabric))
		if err != nil {
			return nil, err
		}
		call, err := s.Prepare(context.Background(), p.specs(), route)
		if err != nil {
			return nil, err
		}
		rep.Domains = call.Topology().Domain
		sched := call.Schedule()
		if err := j.checkEmulation(s, sched, p.members); err != nil {
			call.Close()
			return nil, err
		}
		if sched.Note != "" && j.rank == 0 {
			j.log.Info().Str("route", sched.Route).Msg(sched.Note)
		}
		rr, err := p.measure(call, f)
		call.Close()
		if err != nil {
			return nil, err
		}
		rr.Why = sched.Note
		bounds := map[string]hier.Bound{}
		for _, b := range hier.Bounds(hier.FromPlan(p.plan, call.Topology(), float64(opts.ChunkBytes)), p.fabric) {
			bounds[b.Route] = b
		}
		if b, ok := bounds[strings.TrimPrefix(sched.Route, "auto:")]; ok && b.Seconds > 0 {
			rr.BoundSec, rr.Binding, rr.Ratio = b.Seconds, b.Binding, rr.MedianSec/b.Seconds
		}
		rep.Routes = append(rep.Routes, rr)
	}
	return rep, nil
}

// measure runs one prepared call warmup+iters times and reports it.
func (p *pairRun) measure(call *refit.Call, f *runFlags) (routeReport, error) {
	j, s := p.j, p.s
	sched := call.Schedule()
	rr := routeReport{Route: sched.Route, Iters: f.iters, Rounds: sched.Rounds}
	if s.Options().Device == session.GPU {
		rr.Driver = call.Driver().Name()
	}
	bufs := p.buffers()
	var times timings
	var st refit.Stats
	checkMsg := "" // this rank's first wrong element, in any iteration
	ctx := context.Background()
	bar := j.newProgress(fmt.Sprintf("route %s: iterations", sched.Route), int64(f.warmup+f.iters), "iterations", f.asJSON || f.noProgress)
	defer bar.finish()
	for it := 0; it < f.warmup+f.iters; it++ {
		if f.check || it == 0 {
			if err := inSteps(s, "poison of the destinations", p.poison); err != nil {
				return rr, err
			}
		}
		if err := s.Barrier(ctx); err != nil {
			return rr, err
		}
		t0 := time.Now()
		rep, err := call.Run(ctx, bufs)
		if err != nil {
			if f.atomic {
				err = p.checkUntouched(err)
			}
			return rr, err
		}
		slowest, err := maxOver(s, time.Since(t0).Seconds())
		if err != nil {
			return rr, err
		}
		if it >= f.warmup {
			times.add(slowest)
		}
		st = rep.Stats
		j.log.Debug().Str("route", sched.Route).Int("iter", it).Float64("seconds", slowest).Msg("iteration")
		if f.check {
			err := inSteps(s, "check (comparing every destination element)", func() (err error) {
				if checkMsg == "" && p.dstHost != nil {
					checkMsg, err = p.checkIteration(it, f.warmup)
				}
				return err
			})
			if err != nil {
				return rr, err
			}
		}
		bar.set(int64(it + 1))
	}
	rr.MedianSec, rr.MinSec, rr.MaxSec = times.median(), times.min, times.max
	if rr.MedianSec > 0 {
		rr.TensorGBps = float64(p.src.Bytes()) / rr.MedianSec / 1e9
	}
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Recv[reshard.LinkNetwork], st.Sent[reshard.LinkLocal],
		st.Recv[reshard.LinkLocal], st.Sent[reshard.LinkSelf], st.Packed}
	stopHere("report")
	all, err := gatherInt64s(s, mine)
	if err != nil {
		return rr, err
	}
	topo := call.Topology()
	for r := 0; r < s.Size(); r++ {
		v := all[r*len(mine):]
		t := rankTraffic{Rank: r, Role: role(p.src, p.dst, r), Domain: topo.Domain[r], SentNetwork: v[0], RecvNetwork: v[1],
			SentLocal: v[2], RecvLocal: v[3], Copied: v[4], Packed: v[5]}
		t.Sent, t.Recv = t.SentNetwork+t.SentLocal, t.RecvNetwork+t.RecvLocal
		rr.Ranks = append(rr.Ranks, t)
	}
	first, err := firstMessage(s, checkMsg)
	if err != nil {
		return rr, err
	}
	switch {
	case !f.check:
		rr.Check = "not checked"
	case first == "":
		rr.Check = "passed"
	default:
		rr.Check = "FAILED: " + first
	}
	return rr, nil
}

// poison fills this rank's destination and scale tensor with the poison.
func (p *pairRun) poison() error {
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

// measureLocal measures the local-fabric bandwidth per rank among the
// pair's destination ranks (localBandwidth).
func (p *pairRun) measureLocal(call *refit.Call) (float64, error) {
	bw, err := localBandwidth(p.s, call, p.dst.Mesh().Ranks())
	p.j.log.Debug().Float64("local_bw", bw).Msg("measured local bandwidth")
	return bw, err
}

// localBandwidth measures the local-fabric bandwidth per rank: the
// destination ranks (dst) of each domain pass a buffer around a ring
// inside the domain over the call's transport (local traffic runs at the
// real speed under emulation), all domains at once, and the slowest rank's
// rate counts. Every rank of s takes part.
func localBandwidth(s *session.Session, call *refit.Call, dst []int) (float64, error) {
	const n = 8 << 20
	topo := call.Topology()
	var peers []int
	if slices.Contains(dst, s.Rank()) {
		for _, r := range dst {
			if topo.Domain[r] == topo.Domain[s.Rank()] {
				peers = append(peers, r)
			}
		}
	}
	mem := s.Memory()
	send, err := mem.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer mem.Free(send)
	recv, err := mem.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer mem.Free(recv)
	tr := call.Transport()
	best := 0.0
	for it := 0; it < 3; it++ {
		if err := s.Barrier(context.Background()); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if len(peers) > 1 {
			me := slices.Index(peers, s.Rank())
			next, prev := peers[(me+1)%len(peers)], peers[(me+len(peers)-1)%len(peers)]
			pend, err := tr.Start([]transport.Op{{Peer: prev, Buf: recv, Len: n}, {Peer: next, Send: true, Buf: send, Len: n}})
			if err != nil {
				return 0, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.Options().Timeout)
			err = pend.Wait(ctx)
			cancel()
			if err != nil {
				return 0, err
			}
		}
		slow, err := maxOver(s, time.Since(t0).Seconds())
		if err != nil {
			return 0, err
		}
		best = max(best, n/slow)
	}
	return best, nil
}

// checkUntouched runs after an atomic call failed on every rank: each
// destination compares its buffer with what it held before the call (the
// poison), and the job's error says whether every destination is
// untouched, as the atomic mode promises.
func (p *pairRun) checkUntouched(callErr error) error {
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
	all, err := gatherInt64s(p.s, []int64{changed})
	if err != nil {
		return fmt.Errorf("%w; %v", callErr, err)
	}
	for r, v := range all {
		if v != 0 {
			return jobError{fmt.Errorf("%w; atomic mode broken: rank %d's destination changed although the call failed", callErr, r)}
		}
	}
	return jobError{fmt.Errorf("%w; atomic: every destination still holds its previous bytes", callErr)}
}

// gatherInt64s gathers v from every rank of s, rank r's at r*len(v).
func gatherInt64s(s *session.Session, v []int64) ([]int64, error) {
	return gatherIn(s, "report gathering", v)
}

// gatherIn is gatherInt64s in the named phase (for timeouts).
func gatherIn(s *session.Session, phase string, v []int64) ([]int64, error) {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	all := make([]byte, len(b)*s.Size())
	if err := s.Collective().Allgather(refit.WithPhase(context.Background(), phase), b, all); err != nil {
		return nil, err
	}
	out := make([]int64, len(all)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(all[8*i:]))
	}
	return out, nil
}

// maxOver returns the largest x of every rank of s.
func maxOver(s *session.Session, x float64) (float64, error) {
	all, err := gatherIn(s, "iteration timing", []int64{int64(math.Float64bits(x))})
	if err != nil {
		return 0, err
	}
	m := 0.0
	for _, v := range all {
		m = max(m, math.Float64frombits(uint64(v)))
	}
	return m, nil
}

// firstMessage gathers every rank's message and returns the lowest rank's.
func firstMessage(s *session.Session, msg string) (string, error) {
	blobs, err := refit.Exchange(refit.WithPhase(context.Background(), "check results gathering"), s.Collective(), []byte(msg))
	if err != nil {
		return "", err
	}
	for _, b := range blobs {
		if len(b) > 0 {
			return string(b), nil
		}
	}
	return "", nil
}
