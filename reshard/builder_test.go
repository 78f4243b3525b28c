package reshard

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// worldPlan is a trivial plan over world ranks, for Builders driven by hand.
func worldPlan(t testing.TB, world int) *Plan {
	m, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := placement.NewLayout([]int64{4}, dtype.F32, m, []placement.Placement{placement.Replicate()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(l, l, world, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// randomTopology returns nil domains, one domain, or random domains.
func randomTopology(rng *rand.Rand, world int) Topology {
	switch rng.IntN(3) {
	case 0:
		return Topology{}
	case 1:
		return Topology{Domain: make([]int, world)}
	}
	d := make([]int, world)
	for r := range d {
		d[r] = rng.IntN(3)
	}
	return Topology{Domain: d}
}

// TestBuilderMatchesOracle drives the Builder and the old round-by-round
// Builder with the same random message sequences (sizes from 0 to beyond
// the budget, self copies, dependencies on earlier rounds like the routes'
// AfterRecv, arbitrary lower bounds, a tenth of them tapered) and requires
// the same round for every message.
func TestBuilderMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 5))
	seqs, msgs := 600, 0
	if testing.Short() {
		seqs = 150
	}
	for seq := 0; seq < seqs; seq++ {
		world := 1 + rng.IntN(9)
		topo := randomTopology(rng, world)
		budget := int64(1 + rng.IntN(64))
		if rng.IntN(4) == 0 {
			budget = 1
		}
		b, err := NewBuilder("test", []*Plan{worldPlan(t, world)}, topo, budget)
		if err != nil {
			t.Fatal(err)
		}
		o := newOracleBuilder(world, topo, budget)
		if rng.IntN(3) == 0 { // a lower network receive budget
			o.recvNet = 1 + rng.Int64N(budget)
			if err := b.SetBudgets(o.recvNet, budget); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(3) == 0 { // some ranks with a lower network send budget
			var ranks []int
			for r := 0; r < world; r++ {
				if rng.IntN(2) == 0 {
					ranks = append(ranks, r)
				}
			}
			send := 1 + rng.Int64N(budget)
			o.sendNet = map[int]int64{}
			for _, r := range ranks {
				o.sendNet[r] = send
			}
			if err := b.SetNetSendBudget(ranks, send); err != nil {
				t.Fatal(err)
			}
		}
		n := 1 + rng.IntN(1500)
		var rounds []int
		for i := 0; i < n; i++ {
			m := Message{Src: rng.IntN(world), Dst: rng.IntN(world)}
			switch x := rng.IntN(20); {
			case x == 0:
				m.Bytes = 0
			case x == 1:
				m.Bytes = budget + 1 + rng.Int64N(2*budget)
			case x < 8:
				m.Bytes = budget
			default:
				m.Bytes = 1 + rng.Int64N(budget)
			}
			after := 0
			switch x := rng.IntN(10); {
			case x < 3 && len(rounds) > 0:
				after = AfterRecv(rounds[rng.IntN(len(rounds))])
			case x == 3 && len(rounds) > 0:
				after = rounds[len(rounds)-1]
			case x == 4:
				after = rng.IntN(300) - 20
			}
			// a tenth of the messages tapered (AddTapered), the budgets
			// divided by 2 to 5
			div := int64(1)
			if rng.IntN(10) == 0 {
				div = 2 + rng.Int64N(4)
			}
			want := o.add(m, after, div)
			var got int
			if div > 1 {
				got = b.AddTapered(m, after, div)
			} else {
				got = b.Add(m, after)
			}
			if got != want {
				t.Fatalf("sequence %d (world %d, budget %d, receive budget %d, send budgets %v, topology %v), message %d (%d bytes, %d to %d, after %d, taper %d): round %d, the oracle says %d",
					seq, world, budget, o.recvNet, o.sendNet, topo.Domain, i, m.Bytes, m.Src, m.Dst, after, div, got, want)
			}
			rounds = append(rounds, got)
			msgs++
		}
		if err := b.Err(); err != nil {
			t.Fatal(err)
		}
		s := b.Schedule()
		if len(s.Messages) != n {
			t.Fatalf("sequence %d: %d messages scheduled, %d added", seq, len(s.Messages), n)
		}
	}
	t.Logf("%d messages in %d sequences matched the oracle", msgs, seqs)
}

// TestBuilderMatchesOracleLong places tiny messages between few ranks over
// thousands of rounds, so that the usage trees use their upper levels and
// the free pointers run far ahead, in patterns the routes make (a chain, an
// all-to-all, chunk-major pairs).
func TestBuilderMatchesOracleLong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		world  int
		budget int64
		n      int
		next   func(i int) (Message, int)
	}{
		{"pairs budget 1", 4, 1, 20000, func(i int) (Message, int) {
			return Message{Src: i % 2, Dst: 2 + (i/2)%2, Bytes: 1}, 0
		}},
		{"uneven sizes", 3, 7, 15000, func(i int) (Message, int) {
			return Message{Src: i % 3, Dst: (i + 1 + i/3) % 3, Bytes: int64(1 + (i*5)%7)}, 0
		}},
		{"all to all budget 3", 5, 3, 15000, func(i int) (Message, int) {
			return Message{Src: i % 5, Dst: (i/5 + i) % 5, Bytes: 2}, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, topo := range []Topology{{}, {Domain: make([]int, tc.world)}} {
				b, err := NewBuilder("test", []*Plan{worldPlan(t, tc.world)}, topo, tc.budget)
				if err != nil {
					t.Fatal(err)
				}
				o := newOracleBuilder(tc.world, topo, tc.budget)
				last := 0
				for i := 0; i < tc.n; i++ {
					m, after := tc.next(i)
					if i%97 == 0 {
						after = AfterRecv(last) // a forward, like a chain hop
					}
					want, got := o.add(m, after, 1), b.Add(m, after)
					if got != want {
						t.Fatalf("message %d (%+v after %d): round %d, the oracle says %d", i, m, after, got, want)
					}
					last = got
				}
				if s := b.Schedule(); s.Rounds < 4096 && tc.budget == 1 {
					t.Errorf("only %d rounds", s.Rounds)
				}
			}
		})
	}
}

// TestUsageTree checks the sparse usage tree against a plain map on rounds
// spread over the whole range, where the upper levels decide.
func TestUsageTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const budget = 10
	for trial := 0; trial < 10; trial++ {
		u := newUsage(budget)
		ref := map[int]int64{}
		// clusters of touched rounds at random places, some full runs.
		for c := 0; c < 30; c++ {
			base := rng.IntN(maxRounds - 10000)
			if c%5 == 0 {
				base = maxRounds - 1 - rng.IntN(9000) // near the end
			}
			length := 1 + rng.IntN(9000)
			for r := base; r < min(base+length, maxRounds); r++ {
				n := int64(budget)
				if rng.IntN(8) == 0 {
					n = 1 + rng.Int64N(budget)
				}
				u.add(r, n)
				ref[r] += n
			}
		}
		firstRef := func(r int, limit int64) int {
			for ; r < maxRounds; r++ {
				if ref[r] <= limit {
					return r
				}
			}
			return maxRounds
		}
		for q := 0; q < 3000; q++ {
			var r int
			if q%2 == 0 && len(ref) > 0 {
				for k := range ref { // a touched round
					r = k
					break
				}
			} else if q%4 == 1 {
				r = 0 // searches from the start set and use the fronts
			} else {
				r = rng.IntN(maxRounds)
			}
			limit := rng.Int64N(budget + 2)
			want := firstRef(r, limit)
			if got := u.first(r, limit); got != want {
				t.Fatalf("trial %d: first(%d, %d) = %d, want %d", trial, r, limit, got, want)
			}
			if got := u.find(r, limit); got != want {
				t.Fatalf("trial %d: find(%d, %d) = %d, want %d", trial, r, limit, got, want)
			}
			if q%3 == 0 && want < maxRounds { // charge the answer, as Add does
				u.add(want, 1)
				ref[want]++
			}
		}
		if want := firstRef(0, budget-1); u.free != want {
			t.Fatalf("trial %d: free %d, want %d", trial, u.free, want)
		}
	}
	// a list full to the last round has no room anywhere.
	u := newUsage(1)
	for r := maxRounds - 70; r < maxRounds; r++ {
		u.add(r, 1)
	}
	if got := u.first(maxRounds-70, 0); got != maxRounds {
		t.Errorf("first in a full tail = %d, want maxRounds", got)
	}
}

// TestBuilderRejects: bad messages make the Builder fail with an error
// naming them instead of panicking or looping (issue 17 cases 5 and 12).
func TestBuilderRejects(t *testing.T) {
	p := worldPlan(t, 4)
	tests := []struct {
		name  string
		m     Message
		after int
		want  string
	}{
		{"source outside", Message{Src: 4, Dst: 0, Bytes: 1}, 0, "from rank 4 to rank 0: ranks must lie in the communicator [0, 4)"},
		{"negative rank", Message{Src: 0, Dst: -1, Bytes: 1}, 0, "to rank -1"},
		{"negative bytes", Message{Src: 0, Dst: 1, Bytes: -5}, 0, "has -5 bytes"},
		{"round past the limit", Message{Src: 0, Dst: 1, Bytes: 1}, maxRounds, "in round 16777216, want rounds below 16777216"},
		{"local copy past the limit", Message{Src: 2, Dst: 2, Bytes: 1}, maxRounds + 5, "rounds below"},
	}
	for _, tc := range tests {
		b, err := NewBuilder("flat", []*Plan{p}, Topology{}, 8)
		if err != nil {
			t.Fatal(err)
		}
		if r := b.Add(tc.m, tc.after); r != max(tc.after, 0) {
			t.Errorf("%s: Add returned %d", tc.name, r)
		}
		err = b.Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Err() = %v, want %q", tc.name, err, tc.want)
		}
		b.Add(Message{Src: 0, Dst: 1, Bytes: 1}, 0) // a failed Builder records nothing more
		if n := len(b.Schedule().Messages); n != 0 {
			t.Errorf("%s: %d messages recorded", tc.name, n)
		}
	}
	b, _ := NewBuilder("flat", []*Plan{p}, Topology{}, 8)
	var fe *FieldError
	if err := b.Expect(MaxMessages + 1); !errors.As(err, &fe) || !strings.Contains(err.Error(), "8388609 messages (about 4294967808 bytes), want at most 8388608") {
		t.Errorf("Expect: %v", err)
	}
	for _, tc := range []struct {
		name  string
		ranks []int
		bytes int64
		added bool
		want  string
	}{
		{"send budget zero", []int{1}, 0, false, "network send budget"},
		{"send budget past the round", []int{1}, 9, false, "network send budget"},
		{"send budget rank outside", []int{4}, 4, false, "rank 4, outside the communicator"},
		{"send budget after a message", []int{1}, 4, true, "before the first message"},
	} {
		b, _ := NewBuilder("flat", []*Plan{p}, Topology{}, 8)
		if tc.added {
			b.Add(Message{Src: 0, Dst: 1, Bytes: 1}, 0)
		}
		if err := b.SetNetSendBudget(tc.ranks, tc.bytes); err == nil || !strings.Contains(err.Error(), tc.want) || b.Err() == nil {
			t.Errorf("%s: SetNetSendBudget: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewBuilder("flat", []*Plan{nil}, Topology{}, 8); err == nil {
		t.Error("nil plan accepted")
	}
	if (Topology{Domain: []int{0, 0}}).Class(0, 7) != LinkNetwork || (Topology{Domain: []int{0, 0}}).Class(-1, 1) != LinkNetwork {
		t.Error("ranks outside the topology are not their own domains")
	}
	if err := (Topology{Domain: []int{0, 0}}).Validate(3); err == nil {
		t.Error("short topology accepted")
	}
}
