// Package scheduletest writes a schedule's every message into a hash, the
// one format of the schedule digests that reshard's digest test (small
// conformance cases) and sim's scale digest test (thousands of ranks)
// compare, so that a change which claims to leave schedules byte-identical
// can be checked at any size.
package scheduletest

import (
	"fmt"
	"hash"

	"github.com/m2n-dev/m2n/reshard"
)

// Digest writes s to h: its route, rounds, round bytes and message count,
// then every message's ends, round, bytes, class, tensor, box and regions.
func Digest(h hash.Hash, s *reshard.Schedule) {
	fmt.Fprintf(h, "%s %d %d %d\n", s.Route, s.Rounds, s.RoundBytes, len(s.Messages))
	for _, m := range s.Messages {
		fmt.Fprintf(h, "%d %d %d %d %d %d %v", m.Src, m.Dst, m.Round, m.Bytes, m.Class, m.Tensor, m.Box)
		for _, sg := range m.From {
			fmt.Fprintf(h, " f%d/%d/%v", sg.Tensor, sg.Buf, sg.At)
		}
		for _, sg := range m.To {
			fmt.Fprintf(h, " t%d/%d/%v", sg.Tensor, sg.Buf, sg.At)
		}
		h.Write([]byte{'\n'})
	}
}
