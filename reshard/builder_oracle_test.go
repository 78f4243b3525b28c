package reshard

// oracleBuilder is the Builder as it was before its bookkeeping became a
// tree (commit 79cde72): it scans rounds one at a time and keeps a dense
// per-rank, per-round usage list. It is slow (quadratic for tiny chunks)
// but obviously right, and it defines the placement rule: the Builder must
// place every message in exactly the round this one does.
type oracleBuilder struct {
	roundBytes int64
	recvNet    int64         // the network receive budget (SetBudgets)
	local      int64         // the local budget (SetBudgets)
	sendNet    map[int]int64 // per-rank network send budgets (SetNetSendBudget)
	topo       Topology
	use        [2][2][][]int64 // [send, recv][network, local][rank][round] bytes
	open       []int           // [rank] every round before this is full
}

func newOracleBuilder(world int, topo Topology, roundBytes int64) *oracleBuilder {
	return &oracleBuilder{
		roundBytes: roundBytes,
		recvNet:    roundBytes,
		local:      roundBytes,
		topo:       topo,
		use: [2][2][][]int64{
			{make([][]int64, world), make([][]int64, world)},
			{make([][]int64, world), make([][]int64, world)}},
		open: make([]int, world),
	}
}

// add is the old Builder.Add without the message list, with the budgets
// of m's class divided by div (AddTapered; 1 for Add).
func (b *oracleBuilder) add(m Message, after int, div int64) int {
	m.Class = b.topo.Class(m.Src, m.Dst)
	r := max(after, 0)
	if m.Src != m.Dst {
		send, recv := &b.use[0][m.Class][m.Src], &b.use[1][m.Class][m.Dst]
		r = max(r, min(b.open[m.Src], b.open[m.Dst]))
		for !(b.fits(*send, r, m.Bytes, b.budget(0, m.Class, m.Src)/div) && b.fits(*recv, r, m.Bytes, b.budget(1, m.Class, m.Dst)/div)) {
			r++
		}
		*send = oracleCharge(*send, r, m.Bytes)
		*recv = oracleCharge(*recv, r, m.Bytes)
		b.advance(m.Src)
		b.advance(m.Dst)
	}
	return r
}

func (b *oracleBuilder) fits(use []int64, r int, n, budget int64) bool {
	if r >= len(use) || use[r] == 0 {
		return true
	}
	return use[r]+n <= budget
}

func (b *oracleBuilder) budget(dir int, c LinkClass, rank int) int64 {
	switch {
	case c == LinkLocal:
		return b.local
	case dir == 1:
		return b.recvNet
	case b.sendNet[rank] > 0:
		return b.sendNet[rank]
	}
	return b.roundBytes
}

func oracleCharge(use []int64, r int, n int64) []int64 {
	for len(use) <= r {
		use = append(use, 0)
	}
	use[r] += n
	return use
}

func (b *oracleBuilder) advance(rank int) {
	for o := b.open[rank]; ; o++ {
		for dir := range b.use {
			for class := range b.use[dir] {
				if u := b.use[dir][class][rank]; o >= len(u) || u[o] < b.budget(dir, LinkClass(class), rank) {
					b.open[rank] = o
					return
				}
			}
		}
	}
}
