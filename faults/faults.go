package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// Transport returns the transport wrapper the fault switches ask of rank,
// if any (ok false: none), or the first switch that does not parse.
func Transport(rank int) (wrap func(transport.Transport) transport.Transport, ok bool, err error) {
	for _, v := range vars {
		if _, _, err := At(v, rank); err != nil {
			return nil, false, err
		}
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
	_, doWire, _ := At("M2N_FAULT_WIRE", rank)
	if !doKill && !doHang && !doWire && !doStop {
		return nil, false, nil
	}
	return func(t transport.Transport) transport.Transport {
		if doKill {
			t = &killer{Transport: t, at: kill}
		}
		if doHang {
			t = &killer{Transport: t, at: hang, hang: true}
		}
		if doWire {
			t = &wireFault{Transport: t}
		}
		if doStop {
			t = &stopper{Transport: t, rank: rank}
		}
		return t
	}, true, nil
}

// killer is a test-only transport that kills its own process with SIGKILL
// when it starts round n (a rank lost in the middle of a transfer), or
// with hang set stops there for good (a rank alive but stuck, which only
// timeouts can catch).
type killer struct {
	transport.Transport
	at, n int
	hang  bool
}

func (k *killer) Start(ops []transport.Op) (transport.Pending, error) {
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
func (k *killer) MaxInPlaceBytes() int64 { return transport.MaxInPlace(k.Transport) }

// PollsInline forwards the wrapped transport's inline polling.
func (k *killer) PollsInline() bool { return transport.PollsInline(k.Transport) }

// wireFault is a test-only transport that flips one byte of the first
// message its rank receives, as a bad link would: --verify must catch it.
type wireFault struct {
	transport.Transport
	done bool
}

func (w *wireFault) Start(ops []transport.Op) (transport.Pending, error) {
	p, err := w.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return &wirePending{Pending: p, w: w, ops: ops}, nil
}

// MaxInPlaceBytes forwards the wrapped transport's in-place support.
func (w *wireFault) MaxInPlaceBytes() int64 { return transport.MaxInPlace(w.Transport) }

// PollsInline forwards the wrapped transport's inline polling.
func (w *wireFault) PollsInline() bool { return transport.PollsInline(w.Transport) }

type wirePending struct {
	transport.Pending
	w   *wireFault
	ops []transport.Op
}

func (p *wirePending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	for _, o := range p.ops {
		hb, ok := o.Buf.(transport.HostBuffer)
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
