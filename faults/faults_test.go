package faults

import (
	"context"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/transport"
)

func TestAt(t *testing.T) {
	for _, c := range []struct {
		v        string
		rank, n  int
		ok, fail bool
	}{{"", 0, 0, false, false}, {"3", 3, 0, true, false}, {"3", 2, 0, false, false}, {"2:37", 2, 37, true, false},
		{"2:-1", 2, 0, false, true}, {"x", 0, 0, false, true}, {"-1", 0, 0, false, true}} {
		t.Setenv("M2N_FAULT_CORRUPT", c.v)
		n, ok, err := At("M2N_FAULT_CORRUPT", c.rank)
		if (err != nil) != c.fail || ok != c.ok || (ok && n != c.n) {
			t.Errorf("%q at rank %d: %d, %v, %v", c.v, c.rank, n, ok, err)
		}
		if err != nil && !strings.Contains(err.Error(), `M2N_FAULT_CORRUPT "`+c.v+`"`) {
			t.Errorf("%v does not name the variable and value", err)
		}
	}
}

func TestPointAndTransport(t *testing.T) {
	t.Setenv(StopVar, "2:step")
	if r, w, ok, err := Point(StopVar); r != 2 || w != "step" || !ok || err != nil {
		t.Errorf("Point: %d %s %v %v", r, w, ok, err)
	}
	if _, ok, err := Transport(1); ok || err != nil {
		t.Errorf("rank 1 gets a faulty transport: %v %v", ok, err)
	}
	if wrap, ok, err := Transport(2); !ok || err != nil || wrap == nil {
		t.Errorf("rank 2 gets none: %v %v", ok, err)
	}
	t.Setenv(StopVar, "2:nowhere")
	if _, _, err := Transport(2); err == nil || !strings.Contains(err.Error(), "a point among join, prepare, step") {
		t.Errorf("bad point: %v", err)
	}
	t.Setenv(StopVar, "")
	t.Setenv("M2N_FAULT_WIRE", "1")
	if _, ok, _ := Transport(1); !ok {
		t.Errorf("the wire fault is not applied")
	}
}

// countingTransport is a transport whose rounds complete at once.
type countingTransport struct {
	transport.Transport
	starts int
}

func (c *countingTransport) Start(ops []transport.Op) (transport.Pending, error) {
	c.starts++
	return donePending{}, nil
}

type donePending struct{ transport.Pending }

func (donePending) Wait(context.Context) error { return nil }

// TestTransportCountsPerRank: every transport the wrapper wraps shares the
// rank's count of rounds and its one byte flipped, so that a fault can
// land in any call, such as the second call (a LoRA sync's adapters) of a
// job whose first runs more rounds; M2N_FAULT_CALL leaves earlier calls'
// transports alone and counts from its call's first round.
func TestTransportCountsPerRank(t *testing.T) {
	recv := func(buf transport.HostBuffer) []transport.Op {
		return []transport.Op{{Buf: buf, Len: int64(len(buf))}}
	}
	t.Setenv("M2N_FAULT_WIRE", "1:3")
	wrap, ok, err := Transport(1)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	first, second := wrap(&countingTransport{}), wrap(&countingTransport{})
	run := func(tr transport.Transport, buf transport.HostBuffer) {
		p, err := tr.Start(recv(buf))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([]transport.HostBuffer, 6)
	for i := range bufs {
		bufs[i] = make(transport.HostBuffer, 4)
	}
	// rounds 0-2 on the first call, then 3-5 on the second: the rank's
	// round 3 is the second call's first.
	for i := range 3 {
		run(first, bufs[i])
	}
	for i := 3; i < 6; i++ {
		run(second, bufs[i])
	}
	for i, b := range bufs {
		if flipped := b[0] != 0; flipped != (i == 3) {
			t.Errorf("round %d: flipped %v", i, flipped)
		}
	}
	t.Setenv(CallVar, "1")
	wrap, _, _ = Transport(1)
	inner := &countingTransport{}
	if got := wrap(inner); got != transport.Transport(inner) {
		t.Errorf("call 0 wrapped with M2N_FAULT_CALL=1")
	}
	t.Setenv("M2N_FAULT_WIRE", "1")
	wrap, _, _ = Transport(1)
	wrap(&countingTransport{})
	b := make(transport.HostBuffer, 4)
	run(wrap(&countingTransport{}), b)
	if b[0] == 0 {
		t.Errorf("call 1's first message not flipped with M2N_FAULT_CALL=1")
	}
	t.Setenv(CallVar, "x")
	if _, _, err := Transport(1); err == nil || !strings.Contains(err.Error(), `M2N_FAULT_CALL "x"`) {
		t.Errorf("bad %s: %v", CallVar, err)
	}
}
