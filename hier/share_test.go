package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// TestLeadersRotate: eight tensors, each replicated on all eight ranks of
// one destination domain and sent by one source, have eight different
// leaders, so that every rank fans out one tensor: with the paper's rule
// alone the domain's first rank would lead (and fan out) all eight.
func TestLeadersRotate(t *testing.T) {
	for _, bal := range []Balance{BalanceCount, BalanceBytes} {
		shape := []int64{16, 16}
		src := layoutOf(t, shape, []int{1}, []int{0}, "R")
		dst := layoutOf(t, shape, []int{8}, seq(1, 8), "R")
		world := 9
		plans := samePlans(t, src, dst, world, 8)
		topo, err := Domains(make([]int, world), src, dst, DomainSizes{Dst: 8})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Hier{Balance: bal}.Schedule(plans, topo, reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		sent, _ := traffic(s)
		tensor := int64(16 * 16 * 2)
		for r := 1; r < world; r++ {
			if got, want := sent[r][reshard.LinkLocal], 7*tensor; got != want {
				t.Errorf("balance %s: rank %d fans out %d bytes, want %d (one tensor to seven replicas)", bal, r, got, want)
			}
		}
	}
}

// TestReceiveShare: one source feeding four destinations 16 KiB each,
// with 32 KiB rounds, gives each destination at most a quarter of a round
// (8 KiB: its share of the one sender's round) per round, in chunks cut to
// half that size, so that calls running at once into the same destinations
// add up to no more than a round; without the share, a destination would
// take 16 KiB in round 0.
func TestReceiveShare(t *testing.T) {
	shape := []int64{128, 256} // 64 KiB: 16 KiB per destination
	src := layoutOf(t, shape, []int{1}, []int{0}, "R")
	dst := layoutOf(t, shape, []int{4}, seq(1, 4), "S0")
	opts := reshard.ScheduleOptions{ChunkBytes: 16 << 10, StagingBytes: 256 << 10}
	s := schedule1(t, src, dst, 5, DomainSizes{Src: 1, Dst: 4}, opts)
	type key struct{ round, rank int }
	recv := map[key]int64{}
	for _, m := range s.Messages {
		if m.Class == reshard.LinkNetwork {
			recv[key{m.Round, m.Dst}] += m.Bytes
		}
	}
	share := opts.RoundBytes() / 4
	for k, v := range recv {
		if v > share {
			t.Errorf("round %d: rank %d receives %d bytes, want at most %d", k.round, k.rank, v, share)
		}
	}
}

// schedule1 schedules one tensor's hier route.
func schedule1(t *testing.T, src, dst placement.Layout, world int, sizes DomainSizes, opts reshard.ScheduleOptions) *reshard.Schedule {
	t.Helper()
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := Domains(make([]int, world), src, dst, sizes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Hier{}.Schedule([]*reshard.Plan{plan}, topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForwardShare: the generator's ranks, which forward what they
// receive to the leaders of other domains, send at most the network
// receive budget over the network in any round, as they receive: 2
// sources feed 4 domains of 2 ranks (each domain one replica of 2 shards)
// many one-chunk tensors, each forwarded down a tree of the domains, and
// with the round budget an entry leader sent both copies of each chunk it
// received in one round, twice the receive budget (issue 25: 16 pipeline
// stages' leaders forwarding at once bound the NeMo-RL HGX schedule).
func TestForwardShare(t *testing.T) {
	shape := []int64{16, 64} // 2 KiB: one chunk per shard
	src := layoutOf(t, shape, []int{2}, []int{0, 1}, "S0")
	dst := layoutOf(t, shape, []int{4, 2}, seq(2, 8), "R,S1")
	world := 10
	plans := samePlans(t, src, dst, world, 24)
	topo, err := Domains(make([]int, world), src, dst, DomainSizes{Src: 1, Dst: 2})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 32 << 10}
	s, err := Hier{}.Schedule(plans, topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ round, rank int }
	sent, recv := map[key]int64{}, map[key]int64{}
	for _, m := range s.Messages {
		if m.Class == reshard.LinkNetwork {
			sent[key{m.Round, m.Src}] += m.Bytes
			recv[key{m.Round, m.Dst}] += m.Bytes
		}
	}
	share := opts.RoundBytes() * 2 / 8 // 2 senders' rounds over 8 receivers
	forwarded := false
	for k, v := range sent {
		if k.rank < 2 || v == 0 {
			continue // a source
		}
		forwarded = true
		if v > share {
			t.Errorf("round %d: rank %d forwards %d bytes, want at most %d", k.round, k.rank, v, share)
		}
	}
	for k, v := range recv {
		if v > share {
			t.Errorf("round %d: rank %d receives %d bytes, want at most %d", k.round, k.rank, v, share)
		}
	}
	if !forwarded {
		t.Fatal("no rank forwards: the test does not test the forward budget")
	}
}

// TestSourcesPaced: two sources each send half of a tensor replicated on
// two domains of one rank, into one domain each, and each domain forwards
// what it took in to the other: every receiver takes in the whole tensor
// (8 rounds of 8 KiB) where every source sends half (4 rounds), so the
// sources send at most half a round per round (spread over the receivers'
// 8 rounds) and a chunk of slack; with the round budget they sent full
// rounds that the forwards then left the receivers no room beside.
func TestSourcesPaced(t *testing.T) {
	shape := []int64{128, 256} // 64 KiB
	src := layoutOf(t, shape, []int{2}, []int{0, 1}, "S0")
	dst := layoutOf(t, shape, []int{2}, []int{2, 3}, "R")
	opts := reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 64 << 10}
	s := schedule1(t, src, dst, 4, DomainSizes{Src: 1, Dst: 1}, opts)
	type key struct{ round, rank int }
	sent := map[key]int64{}
	for _, m := range s.Messages {
		if m.Class == reshard.LinkNetwork && m.Src < 2 {
			sent[key{m.Round, m.Src}] += m.Bytes
		}
	}
	pace := opts.RoundBytes()/2 + opts.ChunkBytes
	for k, v := range sent {
		if v > pace {
			t.Errorf("round %d: source %d sends %d bytes, want at most %d", k.round, k.rank, v, pace)
		}
	}
}
