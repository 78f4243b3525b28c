package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
)

// handBuilder starts a schedule of hand-placed messages over world ranks.
func handBuilder(t *testing.T, world int, topo reshard.Topology, roundBytes int64) *reshard.Builder {
	t.Helper()
	sm, _ := mesh.Interval([]int{1}, 0)
	dm, _ := mesh.Interval([]int{1}, world-1)
	l1, err := placement.NewLayout([]int64{8}, dtype.U8, sm, []placement.Placement{placement.Replicate()})
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := placement.NewLayout([]int64{8}, dtype.U8, dm, []placement.Placement{placement.Replicate()})
	p, err := reshard.NewPlan(l1, l2, world, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := reshard.NewBuilder("hand", []*reshard.Plan{p}, topo, roundBytes)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// msg is a message of n contiguous bytes; isStrided makes its source side two
// runs (so that it is packed unless the transport moves strided regions).
func msg(src, dst int, n int64, isStrided bool) reshard.Message {
	from := strided.Desc{Run: n}
	if isStrided {
		from = strided.Desc{Run: n / 2, Count: []int64{2}, Stride: []int64{n}}
	}
	return reshard.Message{Src: src, Dst: dst, Bytes: n,
		From: []reshard.Segment{{Buf: reshard.BufSrc, At: from}}, To: []reshard.Segment{{Buf: reshard.BufDst, At: strided.Desc{Run: n}}}}
}

var testCluster = Cluster{Name: "test", DomainGPUs: 8, NetBW: 50e9, GPUsPerNIC: 1, LocalBW: 900e9}

func runHand(t *testing.T, s *reshard.Schedule, c Cluster, topo reshard.Topology) *Result {
	t.Helper()
	p, err := programOf(s, false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runProgram(p, c, topo, runOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s: %.9g s, want %.9g s", what, got, want)
	}
}

// every rank in a domain of its own: all traffic crosses the network.
var apart = reshard.Topology{}

func TestOneMessageIsLatencyPlusBytesOverBandwidth(t *testing.T) {
	b := handBuilder(t, 2, apart, 1<<40)
	b.Add(msg(0, 1, 1e9, false), 0)
	c := testCluster
	c.NetLatency = 5e-6
	res := runHand(t, b.Schedule(), c, apart)
	near(t, "one 1 GB message", res.Seconds, 5e-6+1e9/50e9)
	if res.Critical.Binding != "nic-out r0" && res.Critical.Binding != "nic-in r1" {
		t.Errorf("binding link %q, want one of the message's NIC links", res.Critical.Binding)
	}
	var kinds []string
	for _, s := range res.Critical.Steps {
		kinds = append(kinds, s.Kind)
	}
	if got := strings.Join(kinds, ","); got != "post,latency,transfer" {
		t.Errorf("critical path %s, want post,latency,transfer", got)
	}
}

func TestSenderSharesItsNicFairly(t *testing.T) {
	// rank 0 sends 1 GB to rank 1 and 2 GB to rank 2 in one round: both
	// flows get 25 GB/s until the first ends at 40 ms, then the second has
	// the whole NIC for its last GB: 60 ms in all.
	b := handBuilder(t, 3, apart, 1<<40)
	b.Add(msg(0, 1, 1e9, false), 0)
	b.Add(msg(0, 2, 2e9, false), 0)
	res := runHand(t, b.Schedule(), testCluster, apart)
	near(t, "two flows from one NIC", res.Seconds, 3e9/50e9)
	if got := res.Parts[0].Seconds; got != res.Seconds {
		t.Errorf("part time %g, run %g", got, res.Seconds)
	}
}

func TestTwoRoundsInFlight(t *testing.T) {
	// rank 0: round 0 sends 1 GB over the network to rank 1 (20 ms);
	// rounds 1 and 2 each send 9 MB locally to rank 2 (10 us each). Round
	// 1 posts at once (two rounds in flight); round 2 must wait for round
	// 0 to complete, so the run ends at 20 ms + 10 us.
	topo := reshard.Topology{Domain: []int{0, 1, 0}}
	b := handBuilder(t, 3, topo, 1<<40)
	b.Add(msg(0, 1, 1e9, false), 0)
	b.Add(msg(0, 2, 9e6, false), 1)
	b.Add(msg(0, 2, 9e6, false), 2)
	s := b.Schedule()
	if s.Rounds != 3 {
		t.Fatalf("hand schedule has %d rounds, want 3", s.Rounds)
	}
	res := runHand(t, s, testCluster, topo)
	near(t, "round 2 after round 0", res.Seconds, 1e9/50e9+9e6/900e9)
	// the critical path waits for round 0's network message
	var sawNet bool
	for _, st := range res.Critical.Steps {
		sawNet = sawNet || (st.Kind == "transfer" && st.Link == "nic-out r0")
	}
	if !sawNet {
		t.Errorf("critical path %+v does not wait for round 0's network transfer", res.Critical.Steps)
	}
}

func TestPackAndUnpackAtCopyBandwidth(t *testing.T) {
	// a strided 1 GB message: packed at the sender before the post and
	// unpacked at the receiver after the round (the receiver's region is
	// contiguous here, so only the pack counts): 1 GB / 1 TB/s = 1 ms on
	// top of the 20 ms transfer. In place (MPI datatypes) it is not packed.
	b := handBuilder(t, 2, apart, 1<<40)
	b.Add(msg(0, 1, 1e9, true), 0)
	s := b.Schedule()
	c := testCluster
	c.CopyBW = 1e12
	res := runHand(t, s, c, apart)
	near(t, "packed", res.Seconds, 1e-3+20e-3)
	p, _ := programOf(s, true)
	res2, err := runProgram(p, c, apart, runOptions{})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "in place", res2.Seconds, 20e-3)
	// strided on both sides: packed before and unpacked after, 2 ms.
	b = handBuilder(t, 2, apart, 1<<40)
	m := msg(0, 1, 1e9, true)
	m.To = m.From
	b.Add(m, 0)
	res3 := runHand(t, b.Schedule(), c, apart)
	near(t, "packed and unpacked", res3.Seconds, 2e-3+20e-3)
}

func TestSequentialPartsFollowOnSharedRanks(t *testing.T) {
	// two schedules moving 1 GB each into rank 2, from ranks 0 and 1: run
	// concurrently they share rank 2's NIC (40 ms); one after the other
	// they take 20 ms each (40 ms too), but the second's sender waits.
	mk := func(src int) *reshard.Schedule {
		b := handBuilder(t, 3, apart, 1<<40)
		b.Add(msg(src, 2, 1e9, false), 0)
		return b.Schedule()
	}
	for _, seq := range []bool{false, true} {
		p := newSimProgram(3)
		if _, err := p.AddSchedule(mk(0), addOptions{Name: "a", After: -1}); err != nil {
			t.Fatal(err)
		}
		after := -1
		if seq {
			after = 0
		}
		if _, err := p.AddSchedule(mk(1), addOptions{Name: "b", After: after}); err != nil {
			t.Fatal(err)
		}
		res, err := runProgram(p, testCluster, apart, runOptions{})
		if err != nil {
			t.Fatal(err)
		}
		near(t, "two parts", res.Seconds, 40e-3)
		if seq {
			near(t, "first part", res.Parts[0].Seconds, 20e-3)
		} else {
			near(t, "first part", res.Parts[0].Seconds, 40e-3)
		}
	}
}

func TestPlacementMustMatchTheSchedule(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 0}}
	b := handBuilder(t, 2, topo, 1<<40)
	b.Add(msg(0, 1, 100, false), 0) // local in this topology
	p, err := programOf(b.Schedule(), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runProgram(p, testCluster, apart, runOptions{}); err == nil || !strings.Contains(err.Error(), "scheduled as local") {
		t.Errorf("a schedule built for other domains: error %v, want one naming the class", err)
	}
	small := testCluster
	small.DomainGPUs = 1
	if _, err := runProgram(p, small, topo, runOptions{}); err == nil || !strings.Contains(err.Error(), "holds 2 ranks") {
		t.Errorf("a domain larger than the cluster's: error %v", err)
	}
}

func TestRunIsDeterministic(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 0, 1, 1, 2}}
	b := handBuilder(t, 5, topo, 3e6)
	for r := 0; r < 6; r++ {
		for src := 0; src < 4; src++ {
			b.Add(msg(src, (src+r)%5, int64(1e6+r*1000+src), src%2 == 0), 0)
		}
	}
	s := b.Schedule()
	var first *Result
	for i := 0; i < 3; i++ {
		res := runHand(t, s, testCluster, topo)
		if first == nil {
			first = res
		} else if !reflect.DeepEqual(first, res) {
			t.Fatalf("run %d differs from run 0", i)
		}
	}
}

// TestSeriesCarriesEachLinksBytes wants every link's bytes, and the sum of
// its series' bins, to be the bytes of the messages that cross it (the
// links account what they carried at each change of their sums).
func TestSeriesCarriesEachLinksBytes(t *testing.T) {
	topo := reshard.Topology{Domain: []int{0, 0, 1, 1, 2}}
	b := handBuilder(t, 5, topo, 3e6)
	for r := 0; r < 6; r++ {
		for src := 0; src < 4; src++ {
			b.Add(msg(src, (src+r+1)%5, int64(1e6+r*1000+src), src%2 == 0), 0)
		}
	}
	p, err := programOf(b.Schedule(), false)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := placeRanks(testCluster, topo, p.world)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEngine(p, testCluster, pl, runOptions{Bins: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(e.f.bytes))
	for i := range p.msgs {
		if e.out[i] >= 0 {
			want[e.out[i]] += float64(p.msgs[i].Bytes)
			want[e.in[i]] += float64(p.msgs[i].Bytes)
		}
	}
	for l, w := range want {
		if got := e.f.bytes[l]; math.Abs(got-w) > 1e-9*w {
			t.Errorf("link %d carried %g bytes, its messages %g", l, got, w)
		}
		s := 0.0
		for _, x := range e.ser.data[l*e.ser.n : (l+1)*e.ser.n] {
			s += float64(x)
		}
		if math.Abs(s-w) > 1e-5*w {
			t.Errorf("link %d's series holds %g bytes, its messages %g", l, s, w)
		}
	}
}
