package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// TestTaperEndsSmall: the paper's layer in small (8 sources, rows, to
// TP4 x 2 replicas, columns, in one destination domain) ends with tapered
// rounds: every source's last taperRounds x round/taperDiv network bytes
// or so go in pieces of at most a quarter chunk, in rounds in which it
// sends at most a quarter of the round budget, after its full rounds; and
// the tapered bytes reach the receivers evenly (within 1.5 times the mean; the last chunks of the
// sources' turns all go to the same few leaders).
func TestTaperEndsSmall(t *testing.T) {
	shape := []int64{64, 64, 128} // 1 MiB bf16: 128 KiB per source
	src := layoutOf(t, shape, []int{8}, seq(0, 8), "S0")
	dst := layoutOf(t, shape, []int{2, 4}, seq(8, 8), "R,S1")
	opts := reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 64 << 10} // 8 KiB rounds
	s := schedule1(t, src, dst, 16, DomainSizes{Src: 8, Dst: 8}, opts)
	round := opts.RoundBytes()
	type key struct{ round, rank int }
	sent, recv := map[key]int64{}, map[key]int64{}
	last := map[int]int{} // a source's last network round
	for _, m := range s.Messages {
		if m.Class != reshard.LinkNetwork {
			continue
		}
		sent[key{m.Round, m.Src}] += m.Bytes
		recv[key{m.Round, m.Dst}] += m.Bytes
		last[m.Src] = max(last[m.Src], m.Round)
	}
	tapered := map[int]int64{} // a receiver's bytes in its senders' tapered rounds
	for r := 0; r < 8; r++ {
		// the tapered rounds: from the last, back while the round sends at
		// most a quarter budget.
		var bytes int64
		lo := last[r]
		for ; lo >= 0 && sent[key{lo, r}] <= round/taperDiv; lo-- {
			bytes += sent[key{lo, r}]
		}
		if bytes < round/taperDiv || bytes > taperRounds*round/taperDiv+round/taperDiv {
			t.Errorf("source %d: %d bytes in tapered rounds (%d to %d), want about %d", r, bytes, lo+1, last[r], taperRounds*round/taperDiv)
		}
		for _, m := range s.Messages {
			if m.Src != r || m.Class != reshard.LinkNetwork || m.Round <= lo {
				continue
			}
			tapered[m.Dst] += m.Bytes
			if m.Bytes > opts.ChunkBytes/taperDiv {
				t.Errorf("source %d: a tapered message of %d bytes in round %d, want at most %d", r, m.Bytes, m.Round, opts.ChunkBytes/taperDiv)
			}
		}
	}
	var most, all int64
	for _, v := range tapered {
		most, all = max(most, v), all+v
	}
	if mean := all / 8; 2*most > 3*mean {
		t.Errorf("tapered bytes per receiver %v: the most %d is over 1.5 times the mean %d", tapered, most, mean)
	}
}
