package hier

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// TestDomainsShortHostList is issue 17 case 12: a host list shorter than
// the meshes need indexed out of range.
func TestDomainsShortHostList(t *testing.T) {
	src := layoutOf(t, []int64{8}, []int{2}, []int{0, 1}, "S0")
	dst := layoutOf(t, []int64{8}, []int{2}, []int{2, 3}, "S0")
	for _, host := range [][]int{{0}, nil, {0, 0, 0}} {
		_, err := Domains(host, src, dst, DomainSizes{Dst: 1})
		if err == nil || !strings.Contains(err.Error(), "outside a communicator of") || !strings.Contains(err.Error(), "host list") {
			t.Errorf("Domains(%v) = %v", host, err)
		}
	}
	if _, err := Domains([]int{0, 0, 0, 0}, src, dst, DomainSizes{Dst: 1}); err != nil {
		t.Error(err)
	}
	if n := DomainCount(reshard.Topology{Domain: []int{0, 0}}, dst); n != 2 {
		t.Errorf("DomainCount over ranks the topology does not name = %d, want 2", n)
	}
}

// TestFabricValidate is issue 17 case 9's --latency -1s: the model accepted
// negative latencies and predicted negative times. Auto now refuses such a
// fabric, naming the field and the value.
func TestFabricValidate(t *testing.T) {
	good := Fabric{NetBW: 50e9, LocalBW: 900e9}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Fabric
		want string
	}{
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}, "latency -1 s, want a non-negative, finite time"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.NaN()}, "latency NaN s"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.Inf(1)}, "latency +Inf s"},
		{Fabric{NetBW: 0, LocalBW: 900e9}, "network bandwidth 0 bytes/s, want a positive, finite rate"},
		{Fabric{NetBW: -5, LocalBW: 900e9}, "network bandwidth -5 bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.Inf(1)}, "local bandwidth +Inf bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.NaN()}, "local bandwidth NaN bytes/s"},
	} {
		err := tc.f.Validate()
		var fe *reshard.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.f, err, tc.want)
		}
	}
	src := layoutOf(t, []int64{8, 4}, []int{2}, []int{0, 1}, "S0")
	dst := layoutOf(t, []int64{8, 4}, []int{2}, []int{2, 3}, "S1")
	p, err := reshard.NewPlan(src, dst, 4, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.DefaultScheduleOptions
	if _, err := (Auto{Fabric: Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts); err == nil ||
		!strings.Contains(err.Error(), "latency -1 s") {
		t.Errorf("Auto with a negative latency: %v", err)
	}
	if _, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{Domain: []int{0}}, opts); err == nil || !strings.Contains(err.Error(), "topology") {
		t.Errorf("Auto with a short topology: %v", err)
	}
	s, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts)
	if err != nil || s == nil {
		t.Fatal(err)
	}
	c := (Auto{Fabric: good}).Choose([]*reshard.Plan{p}, reshard.Topology{}, opts)
	for _, b := range c.Bounds {
		if !(b.Predicted >= 0) {
			t.Errorf("%s predicts %g s", b.Route, b.Predicted)
		}
	}
	if _, err := Uniform(math.NaN(), 16, 8, 8, 1, 0); err == nil {
		t.Error("Uniform accepted NaN bytes")
	}
	if _, err := Uniform(1e9, 16, 8, 8, 1, math.Inf(1)); err == nil {
		t.Error("Uniform accepted an infinite chunk")
	}
	if err := (Problem{Bytes: -1}).Validate(); err == nil {
		t.Error("negative bytes accepted")
	}
}

// TestEmulateRates is issue 17 case 7: a rate of 1e-300 bytes/s overflowed
// the float-to-Duration conversion, so no delay was applied. Rates below
// MinEmulatedRate (and NaN, infinite or negative ones) are errors naming
// the value, from NewEmulated at once and from every Start of Emulate; a
// valid rate whose delay would not fit a Duration fails Start, posting
// nothing.
func TestEmulateRates(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 1}}
	for _, rate := range []float64{1e-300, 0, -1, 0.5, math.NaN(), math.Inf(1)} {
		w := inproc.NewWorld(2)
		if _, err := NewEmulated(w.Transport(0), topo, rate); err == nil || !strings.Contains(err.Error(), "emulated network rate") {
			t.Errorf("NewEmulated(%g) = %v", rate, err)
		}
		e := Emulate(w.Transport(0), topo, rate)
		_, err := e.Start([]transport.Op{{Peer: 1, Send: true, Buf: make(transport.HostBuffer, 8), Len: 8}})
		if err == nil || !strings.Contains(err.Error(), "want a finite rate of at least 1 byte/s") {
			t.Errorf("Emulate(%g).Start = %v", rate, err)
		}
	}
	if err := ValidateRate(1); err != nil {
		t.Error(err)
	}

	// 1 byte/s: 2^40 bytes would take 35,000 years.
	w := inproc.NewWorld(2)
	clock := time.Unix(0, 0)
	e := Emulate(w.Transport(0), topo, 1)
	e.now = func() time.Time { return clock }
	_, err := e.Start([]transport.Op{{Peer: 1, Send: true, Buf: make(transport.HostBuffer, 1), Len: 1 << 40}})
	if err == nil || !strings.Contains(err.Error(), "1099511627776 bytes to or from rank 1 would complete 1.1e+12 s from now, more than a time.Duration holds") {
		t.Errorf("Start of 2^40 bytes at 1 byte/s = %v", err)
	}
	// what is booked counts: two ops that fit alone may not together.
	e = Emulate(nullTransport{}, topo, 1)
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

// TestRouteCountsFirst is issue 17 case 11 on the hierarchical route: a
// 2^58-element f64 tensor is refused with the message count before any
// box is cut, and so are 1-byte chunks of a tensor too large for them.
func TestRouteCountsFirst(t *testing.T) {
	src := layoutOfDT(t, []int64{1 << 58}, placement.F64, []int{2}, []int{0, 1}, "S0")
	dst := layoutOfDT(t, []int64{1 << 58}, placement.F64, []int{2, 2}, []int{2, 3, 4, 5}, "R,S0")
	p, err := reshard.NewPlan(src, dst, 6, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := Domains(make([]int, 6), src, dst, DomainSizes{Dst: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, bal := range []Balance{BalanceCount, BalanceBytes} {
		_, err := Hier{Balance: bal}.Schedule([]*reshard.Plan{p}, topo, reshard.DefaultScheduleOptions)
		if err == nil || !strings.Contains(err.Error(), "hier schedule") || !strings.Contains(err.Error(), "want at most 8388608 messages") {
			t.Errorf("%v: %v", bal, err)
		}
	}
}

func layoutOfDT(t *testing.T, shape []int64, dt placement.DType, ms []int, ranks []int, pl string) placement.Layout {
	t.Helper()
	m, err := mesh.New(ms, ranks)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := placement.Parse(pl)
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSplitEvenBadBoxes: boxes SplitEven cannot cut come back whole
// instead of indexing out of range, and long dims cut exactly.
func TestSplitEvenBadBoxes(t *testing.T) {
	for _, b := range []placement.Box{
		{Lo: []int64{0, 3}, Hi: []int64{4, 3}},
		{Lo: []int64{0, 0}, Hi: []int64{4}},
		{Lo: []int64{5}, Hi: []int64{2}},
	} {
		if got := SplitEven(b, 4); len(got) != 1 {
			t.Errorf("SplitEven(%v, 4) = %v", b, got)
		}
	}
	b := placement.Box{Lo: []int64{0}, Hi: []int64{math.MaxInt64}}
	parts := SplitEven(b, 3)
	if len(parts) != 3 || parts[0].Lo[0] != 0 || parts[2].Hi[0] != math.MaxInt64 || parts[1].Lo[0] != math.MaxInt64/3 {
		t.Errorf("SplitEven of [0, MaxInt64) = %v", parts)
	}
}
