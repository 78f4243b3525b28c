package netem

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// TestEmulateRates is issue 17 case 7: a rate of 1e-300 bytes/s overflowed
// the float-to-Duration conversion, so no delay was applied. Rates below
// MinRate (and NaN, infinite or negative ones) are errors naming the
// value, from NewNIC and New; a valid rate whose delay would not fit a
// Duration fails Start, posting nothing.
func TestRates(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 1}}
	for _, rate := range []float64{1e-300, 0, -1, 0.5, math.NaN(), math.Inf(1)} {
		w := inproc.NewWorld(2)
		if _, err := New(w.Transport(0), topo, rate); err == nil || !strings.Contains(err.Error(), "emulated network rate") {
			t.Errorf("New(%g) = %v", rate, err)
		}
		if _, err := NewNIC(rate); err == nil || !strings.Contains(err.Error(), "want a finite rate of at least 1 byte/s") {
			t.Errorf("NewNIC(%g) = %v", rate, err)
		}
	}

	// 1 byte/s: 2^40 bytes would take 35,000 years.
	w := inproc.NewWorld(2)
	clock := time.Unix(0, 0)
	e := mustNew(t, w.Transport(0), topo, 1)
	e.now = func() time.Time { return clock }
	_, err := e.Start([]transport.Op{{Peer: 1, Send: true, Buf: make(transport.HostBuffer, 1), Len: 1 << 40}})
	if err == nil || !strings.Contains(err.Error(), "1099511627776 bytes to or from rank 1 would complete 1.1e+12 s from now, more than a time.Duration holds") {
		t.Errorf("Start of 2^40 bytes at 1 byte/s = %v", err)
	}
	// what is booked counts: two ops that fit alone may not together.
	e = mustNew(t, nullTransport{}, topo, 1)
	e.now = func() time.Time { return clock }
	year := int64(365 * 24 * 3600)
	p, err := e.Start([]transport.Op{{Peer: 1, Send: true, Buf: make(transport.HostBuffer, 1), Len: 200 * year}})
	if err != nil {
		t.Fatal(err)
	}
	_ = p
	if _, err := e.Start([]transport.Op{{Peer: 1, Send: true, Buf: make(transport.HostBuffer, 1), Len: 200 * year}}); err == nil {
		t.Error("400 years of booking accepted")
	}
	if got := e.nic.sendFree.Sub(clock); got != time.Duration(200*year)*time.Second {
		t.Errorf("a refused Start changed the booking: %v", got)
	}
}

// nullTransport accepts every round and completes it at once.
type nullTransport struct{}

func (nullTransport) Rank() int                                       { return 0 }
func (nullTransport) Size() int                                       { return 2 }
func (nullTransport) Abort(error)                                     {}
func (nullTransport) Start([]transport.Op) (transport.Pending, error) { return nullPending{}, nil }

type nullPending struct{}

func (nullPending) Wait(context.Context) error { return nil }

func mustNew(t *testing.T, inner transport.Transport, topo reshard.Topology, rate float64) *Transport {
	t.Helper()
	e, err := New(inner, topo, rate)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
