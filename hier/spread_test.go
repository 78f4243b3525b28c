package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// TestLargeContributionShared: a tensor replicated on all eight ranks of
// one destination domain, sent whole by one source (one contribution of
// sixteen chunks), is led by all eight replicas, an eighth each: with one
// leader per contribution, that rank took the whole tensor over its NIC
// and, where the domains form a tree, forwarded it whole (DeepSeek-V3's
// lm_head and embedding under TP8 from TP1 trainers: 1.52 GB on one
// generator NIC out at 2048 and 4096 ranks alike; issue 25).
func TestLargeContributionShared(t *testing.T) {
	shape := []int64{16, 256} // 8 KiB: 16 chunks of 512 bytes
	src := layoutOf(t, shape, []int{1}, []int{0}, "R")
	dst := layoutOf(t, shape, []int{8}, seq(1, 8), "R")
	// round 8 KiB; one source over eight receivers: a receive budget of
	// 1 KiB and chunks of 512 bytes
	opts := reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 64 << 10}
	s := schedule1(t, src, dst, 9, DomainSizes{Src: 1, Dst: 8}, opts)
	_, recv := traffic(s)
	tensor := int64(16 * 256 * 2)
	for r := 1; r < 9; r++ {
		if got, want := recv[r][reshard.LinkNetwork], tensor/8; got != want {
			t.Errorf("rank %d receives %d network bytes, want %d (an eighth of the tensor)", r, got, want)
		}
	}
}

// TestCountPartsWholeChunks: a contribution is cut into parts only where
// its shard has fewer contributions than replicas, into about replicas /
// contributions parts, and never into parts under a chunk.
func TestCountPartsWholeChunks(t *testing.T) {
	for _, tc := range []struct {
		bytes          int64
		contribs, reps int
		chunk          int64
		want           int
	}{
		{16 << 10, 1, 8, 1 << 10, 8}, // one contribution, eight replicas
		{16 << 10, 2, 8, 1 << 10, 4}, // two contributions share eight replicas
		{3 << 10, 1, 8, 1 << 10, 3},  // parts of at least a chunk
		{1 << 10, 1, 8, 1 << 10, 1},  // one chunk: whole
		{16 << 10, 8, 8, 1 << 10, 1}, // as many contributions as replicas
		{16 << 10, 3, 8, 1 << 10, 3}, // ceil(8/3)
	} {
		if got := countParts(tc.bytes, tc.contribs, tc.reps, tc.chunk); got != tc.want {
			t.Errorf("countParts(%d, %d, %d, %d) = %d, want %d", tc.bytes, tc.contribs, tc.reps, tc.chunk, got, tc.want)
		}
	}
}

// TestEntriesRotate: eight one-chunk tensors, each replicated on four
// domains of one rank and sent by one source, enter at every domain in
// turn, two each, so that each domain's leader roots the tree of two and
// forwards alike: with the entry by contribution index alone, every
// single-contribution shard entered at its first domain, and the domains
// at the top of every tree forwarded for all of them while the leaves
// forwarded nothing.
func TestEntriesRotate(t *testing.T) {
	shape := []int64{16, 16} // 512 bytes: one chunk
	src := layoutOf(t, shape, []int{1}, []int{0}, "R")
	dst := layoutOf(t, shape, []int{4}, seq(1, 4), "R")
	world := 5
	plans := samePlans(t, src, dst, world, 8)
	topo, err := Domains(make([]int, world), src, dst, DomainSizes{Src: 1, Dst: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Hier{}.Schedule(plans, topo, reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	entered := map[int]int64{}
	for _, m := range s.Messages {
		if m.Src == 0 && m.Class == reshard.LinkNetwork {
			entered[m.Dst] += m.Bytes
		}
	}
	for r := 1; r < world; r++ {
		if got, want := entered[r], int64(2*512); got != want {
			t.Errorf("domain of rank %d: %d bytes enter from the source, want %d (two tensors)", r, got, want)
		}
	}
}
