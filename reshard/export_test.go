package reshard

import "fmt"

// WatchBuilders makes every Builder check each placement against
// oracleBuilder, the old round-by-round scan, until the returned function
// is called; that function reports how many messages were compared and
// the first placement that differed. Not safe with parallel tests.
func WatchBuilders() (stop func() (int, error)) {
	oracles := map[*Builder]*oracleBuilder{}
	n := 0
	var first error
	addHook = func(b *Builder, m Message, after int, div int64) {
		o := oracles[b]
		if o == nil {
			o = newOracleBuilder(b.s.World, b.topo, b.s.RoundBytes)
			o.recvNet, o.local = b.recvNet, b.local
			for r, v := range b.sendNet {
				if v > 0 {
					if o.sendNet == nil {
						o.sendNet = map[int]int64{}
					}
					o.sendNet[r] = v
				}
			}
			oracles[b] = o
		}
		n++
		if want := o.add(m, after, div); want != m.Round && first == nil {
			first = fmt.Errorf("%s schedule, message %d (%d bytes, rank %d to %d, after %d, taper %d): round %d, the oracle says %d",
				b.s.Route, len(b.s.Messages)-1, m.Bytes, m.Src, m.Dst, after, div, m.Round, want)
		}
	}
	return func() (int, error) {
		addHook = nil
		return n, first
	}
}
