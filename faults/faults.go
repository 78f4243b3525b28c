package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/m2n-dev/m2n/transport"
)

var vars = []string{"M2N_FAULT_KILL", "M2N_FAULT_HANG", "M2N_FAULT_WIRE", "M2N_FAULT_CORRUPT", "M2N_FAULT_SHORT_DST", "M2N_FAULT_NAN"}

// At reads a fault switch: whether it names rank, and n (0 if absent). A
// value that does not parse is an error naming the variable.
func At(env string, rank int) (int, bool, error) {
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return 0, false, nil
	}
	r, n, hasN := strings.Cut(v, ":")
	rr, err := strconv.Atoi(r)
	k := 0
	if err == nil && hasN {
		k, err = strconv.Atoi(n)
	}
	if err != nil || rr < 0 || k < 0 {
		return 0, false, fmt.Errorf("%s %q: want rank or rank:n with whole numbers of at least 0", env, v)
	}
	return k, rr == rank, nil
}

// CallVar (M2N_FAULT_CALL=c) arms the transport switches (KILL, HANG,
// WIRE, and STOP or PANIC at step) from the rank's c-th prepared call on
// (0, the first, by default): the transports of its earlier calls are left
// as they are, and its rounds are counted from the first round of call c.
// It names no rank: it applies to the rank the other switches name. A
// model of several pipeline stages prepares one call per stage this rank
// is in, in stage order; a LoRA sync prepares the model's, then the
// adapters'.
const CallVar = "M2N_FAULT_CALL"

// Transport returns the transport wrapper the fault switches ask of rank,
// if any (ok false: none), or the first switch that does not parse.
//
// What the switches count is the rank's, not a call's: every transport the
// wrapper wraps (every call the rank prepares from call CallVar on, in
// every pipeline stage and every model) shares one count of rounds started
// and one each of the faults that fire once (the byte flipped, the stop),
// so that M2N_FAULT_KILL=r:n names the rank's n-th round whichever call
// runs it. (Each wrapped transport once counted for itself: round n named
// a round of the first call that got that far, the first model's, and a
// round past that call's last was never reached by a smaller call
// prepared after it, such as a LoRA sync's adapters.)
func Transport(rank int) (wrap func(transport.Transport) transport.Transport, ok bool, err error) {
	for _, v := range vars {
		if _, _, err := At(v, rank); err != nil {
			return nil, false, err
		}
	}
	fromCall, err := callFrom()
	if err != nil {
		return nil, false, err
	}
	pr, pw, doPanic, err := Point(PanicVar)
	if err != nil {
		return nil, false, err
	}
	sr, sw, doStop, err := Point(StopVar)
	if err != nil {
		return nil, false, err
	}
	doStop = doStop && sr == rank && sw == "step" || doPanic && pr == rank && pw == "step"
	kill, doKill, _ := At("M2N_FAULT_KILL", rank)
	hang, doHang, _ := At("M2N_FAULT_HANG", rank)
	wire, doWire, _ := At("M2N_FAULT_WIRE", rank)
	if !doKill && !doHang && !doWire && !doStop {
		return nil, false, nil
	}
	st := &rankState{rank: rank, fromCall: fromCall, kill: -1, hang: -1, wire: -1, stop: doStop}
	if doKill {
		st.kill = kill
	}
	if doHang {
		st.hang = hang
	}
	if doWire {
		st.wire = wire
	}
	return st.wrap, true, nil
}

// callFrom reads CallVar: the first call armed (0 when unset).
func callFrom() (int, error) {
	v := strings.TrimSpace(os.Getenv(CallVar))
	if v == "" {
		return 0, nil
	}
	c, err := strconv.Atoi(v)
	if err != nil || c < 0 {
		return 0, fmt.Errorf("%s %q: want the index of a prepared call, a whole number of at least 0", CallVar, v)
	}
	return c, nil
}

// rankState is what one rank's fault switches share over every transport
// they wrap: the calls wrapped so far, the rounds started in armed calls,
// and whether the faults that fire once have. A rank's pipeline stages run
// their calls concurrently: mu guards it all.
type rankState struct {
	rank             int
	fromCall         int
	kill, hang, wire int // the round each fires at (wire: from), -1: off
	stop             bool

	mu            sync.Mutex
	calls, rounds int
	wired         bool
}

// wrap is the wrapper of one prepared call's transport.
func (s *rankState) wrap(t transport.Transport) transport.Transport {
	s.mu.Lock()
	call := s.calls
	s.calls++
	s.mu.Unlock()
	if call < s.fromCall {
		return t
	}
	return &faulty{Transport: t, s: s}
}

// faulty is a test-only transport of the rank's switches: it kills its own
// process with SIGKILL when the rank starts round kill (a rank lost in the
// middle of a transfer), stops there for good at round hang (a rank alive
// but stuck, which only timeouts can catch), stops (or panics) as the
// first round starts (StopHere's "step"), and flips one byte of the first
// message the rank receives from round wire on, as a bad link would
// (--verify must catch it).
type faulty struct {
	transport.Transport
	s *rankState
}

func (f *faulty) Start(ops []transport.Op) (transport.Pending, error) {
	s := f.s
	s.mu.Lock()
	n := s.rounds
	s.rounds++
	stop := s.stop
	s.stop = false
	s.mu.Unlock()
	if stop {
		StopHere(s.rank, "step")
	}
	if n == s.hang {
		fmt.Fprintf(os.Stderr, "refit: rank %d: M2N_FAULT_HANG: stopping for good at round %d\n", s.rank, n)
		select {}
	}
	if n == s.kill {
		fmt.Fprintf(os.Stderr, "refit: rank %d: M2N_FAULT_KILL: killing myself at round %d\n", s.rank, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	p, err := f.Transport.Start(ops)
	if err != nil || s.wire < 0 || n < s.wire {
		return p, err
	}
	return &wirePending{Pending: p, s: s, ops: ops}, nil
}

// MaxInPlaceBytes forwards the wrapped transport's in-place support.
func (f *faulty) MaxInPlaceBytes() int64 { return transport.MaxInPlace(f.Transport) }

// PollsInline forwards the wrapped transport's inline polling.
func (f *faulty) PollsInline() bool { return transport.PollsInline(f.Transport) }

// wirePending flips the byte when a round's receives complete.
type wirePending struct {
	transport.Pending
	s   *rankState
	ops []transport.Op
}

func (p *wirePending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range p.ops {
		hb, ok := o.Buf.(transport.HostBuffer)
		if s.wired || o.Send || !ok || o.Len == 0 {
			continue
		}
		at := o.Off
		if o.InPlace {
			at = o.At.Offset
		}
		hb[at] ^= 0x08
		s.wired = true
	}
	return nil
}
