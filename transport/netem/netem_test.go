package netem

import (
	"context"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// TestEmulatedRates runs real in-process transfers through the emulator
// with a fake clock and checks the time it makes each round wait: cross-
// domain operations queue on the rank's emulated interface at the given
// rate, local ones cost nothing.
func TestEmulatedRates(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 1, 1}}
	w := inproc.NewWorld(3)
	clock := time.Unix(0, 0)
	var slept [3][]time.Duration
	emu := make([]*Transport, 3)
	for r := range emu {
		emu[r] = mustNew(t, w.Transport(r), topo, 1e6) // 1 MB/s
		emu[r].now = func() time.Time { return clock }
		r := r
		emu[r].sleep = func(_ context.Context, d time.Duration) error {
			slept[r] = append(slept[r], d)
			return nil
		}
	}
	buf := func(n int) transport.HostBuffer { return make(transport.HostBuffer, n) }
	// rank 0 sends 2000 and 3000 bytes to rank 1 (network) and 5000 to
	// rank 2 (network); rank 1 sends 4000 bytes to rank 2 (local).
	p0, err := emu[0].Start([]transport.Op{
		{Peer: 1, Send: true, Buf: buf(2000), Len: 2000}, {Peer: 1, Send: true, Buf: buf(3000), Len: 3000},
		{Peer: 2, Send: true, Buf: buf(5000), Len: 5000}})
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := emu[1].Start([]transport.Op{{Peer: 0, Buf: buf(2000), Len: 2000}, {Peer: 0, Buf: buf(3000), Len: 3000},
		{Peer: 2, Send: true, Buf: buf(4000), Len: 4000}})
	p2, _ := emu[2].Start([]transport.Op{{Peer: 0, Buf: buf(5000), Len: 5000}, {Peer: 1, Buf: buf(4000), Len: 4000}})
	for _, p := range []transport.Pending{p0, p1, p2} {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{10 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}
	for r, w := range want {
		if len(slept[r]) != 1 || slept[r][0] != w {
			t.Errorf("rank %d waited %v, want %v", r, slept[r], w)
		}
	}
	// the interface stays busy: a second round right away queues behind.
	p, _ := emu[2].Start([]transport.Op{{Peer: 0, Buf: buf(1000), Len: 1000}})
	q, _ := emu[0].Start([]transport.Op{{Peer: 2, Send: true, Buf: buf(1000), Len: 1000}})
	if err := q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := slept[2][1]; got != 6*time.Millisecond {
		t.Errorf("rank 2's second round waited %v, want 6ms (5ms queued + 1ms)", got)
	}
}

// TestSleepPolls checks that the emulated wait after the transfers keeps
// calling its context's poll (transport.WithPoll) and stops at its error.
func TestSleepPolls(t *testing.T) {
	n := 0
	fail := context.Canceled
	ctx := transport.WithPoll(context.Background(), func(time.Duration) error {
		if n++; n == 4 {
			return fail
		}
		return nil
	})
	if err := sleepCtx(ctx, time.Minute); err != fail || n != 4 {
		t.Fatalf("sleepCtx = %v after %d polls, want the poll's error after 4", err, n)
	}
	if err := sleepCtx(transport.WithPoll(context.Background(), func(time.Duration) error { return nil }), 3*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
