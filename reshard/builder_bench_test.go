package reshard

import (
	"fmt"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// builderPattern is a message sequence as the routes make them: nRanks
// sources each send to nRanks destinations (ranks nRanks..2*nRanks-1),
// chunk-major, with chunks of half the round budget and every seventh
// chunk a short tail, and every fifth message a forward after its
// predecessor (AfterRecv), like a chain hop.
func builderPattern(n, nRanks int) ([]Message, []int) {
	const budget = 1 << 20
	msgs := make([]Message, n)
	dep := make([]int, n) // index of the message this one forwards, -1 for none
	for i := range msgs {
		pair := i % (nRanks * nRanks)
		bytes := int64(budget / 2)
		if (i/(nRanks*nRanks))%7 == 6 {
			bytes = budget / 5
		}
		msgs[i] = Message{Src: pair / nRanks, Dst: nRanks + pair%nRanks, Bytes: bytes}
		dep[i] = -1
		if i%5 == 4 {
			dep[i] = i - 1
		}
	}
	return msgs, dep
}

// BenchmarkBuilder adds n messages to a Builder and reports the cost per
// message, which must stay flat from a thousand to a million messages.
func BenchmarkBuilder(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000, 1000000} {
		for _, ranks := range []int{4, 64} {
			msgs, dep := builderPattern(n, ranks)
			plan := worldPlan(b, 2*ranks)
			b.Run(fmt.Sprintf("messages=%d/ranks=%d", n, 2*ranks), func(b *testing.B) {
				var rounds int
				for b.Loop() {
					bl, err := NewBuilder("bench", []*Plan{plan}, Topology{}, 1<<20)
					if err != nil {
						b.Fatal(err)
					}
					if err := bl.Expect(int64(n)); err != nil { // as the routes do
						b.Fatal(err)
					}
					got := make([]int, n)
					for i, m := range msgs {
						after := 0
						if dep[i] >= 0 {
							after = AfterRecv(got[dep[i]])
						}
						got[i] = bl.Add(m, after)
					}
					rounds = bl.Schedule().Rounds
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/message")
				b.ReportMetric(float64(rounds), "rounds")
			})
		}
	}
}

// BenchmarkBuilderOracle is the same with the old round-by-round Builder,
// for comparison (only up to 30,000 messages: it is quadratic).
func BenchmarkBuilderOracle(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		msgs, dep := builderPattern(n, 4)
		b.Run(fmt.Sprintf("messages=%d/ranks=8", n), func(b *testing.B) {
			for b.Loop() {
				o := newOracleBuilder(8, Topology{}, 1<<20)
				got := make([]int, n)
				for i, m := range msgs {
					after := 0
					if dep[i] >= 0 {
						after = AfterRecv(got[dep[i]])
					}
					got[i] = o.add(m, after, 1)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/message")
		})
	}
}

// BenchmarkBuilderTinyChunks is issue 17 case 5: a square f32 tensor from
// 2 ranks Shard(0) to 2 ranks Shard(1) on the flat route with 1-byte
// chunks and 8 bytes of staging (a round budget of one byte), so that every
// element is a message of its own round: the whole Flat call (plan
// transfers, chunking, descriptors, placement), per message.
func BenchmarkBuilderTinyChunks(b *testing.B) {
	for _, shape := range [][2]int64{{64, 64}, {256, 256}, {1024, 1024}, {2048, 1024}} {
		m2, _ := mesh.Interval([]int{2}, 0)
		d2, _ := mesh.Interval([]int{2}, 2)
		src, _ := placement.NewLayout(shape[:], dtype.F32, m2, []placement.Placement{placement.Shard(0)})
		dst, _ := placement.NewLayout(shape[:], dtype.F32, d2, []placement.Placement{placement.Shard(1)})
		plan, err := NewPlan(src, dst, 4, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
			var s *Schedule
			for b.Loop() {
				if s, err = Flat.Schedule([]*Plan{plan}, Topology{}, ScheduleOptions{ChunkBytes: 1, StagingBytes: 8}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s.Messages)), "ns/message")
			b.ReportMetric(float64(len(s.Messages)), "messages")
			b.ReportMetric(float64(s.Rounds), "rounds")
		})
	}
}

// BenchmarkBuilderFlat is the whole flat route (transfers, chunking,
// descriptors, placement, the final sort) for an 8192x8192 f32 tensor from
// 8 ranks Shard(0) to 8 ranks Shard(1), 64 transfers of 4 MiB, with chunks
// that make from about a thousand to a million messages (a round budget of
// two chunks), per message.
func BenchmarkBuilderFlat(b *testing.B) {
	m8, _ := mesh.Interval([]int{8}, 0)
	d8, _ := mesh.Interval([]int{8}, 8)
	src, _ := placement.NewLayout([]int64{8192, 8192}, dtype.F32, m8, []placement.Placement{placement.Shard(0)})
	dst, _ := placement.NewLayout([]int64{8192, 8192}, dtype.F32, d8, []placement.Placement{placement.Shard(1)})
	plan, err := NewPlan(src, dst, 16, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, perTransfer := range []int64{16, 128, 1024, 16384} {
		chunk := (4 << 20) / perTransfer
		b.Run(fmt.Sprintf("messages=%d", 64*perTransfer), func(b *testing.B) {
			var s *Schedule
			for b.Loop() {
				if s, err = Flat.Schedule([]*Plan{plan}, Topology{}, ScheduleOptions{ChunkBytes: chunk, StagingBytes: 16 * chunk}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s.Messages)), "ns/message")
			b.ReportMetric(float64(s.Rounds), "rounds")
		})
	}
}
