package hier

import (
	"github.com/m2n-dev/m2n/reshard"
)

// How a schedule ends. A leader fans a chunk out over the local fabric in
// the second round after it received it (reshard.AfterRecv), and the
// executor keeps two rounds in flight, which run side by side: the last
// two network rounds end together, at the last network byte, and their
// fan-out comes after it, on no network link's time. With full last
// rounds that tail is two rounds' fan-out (the paper's layer: 62, 93 and
// 109 us after 8.96 ms at rho 2, 4 and 8, issue 25). A taper ends the
// schedule with rounds that carry a fraction of a round: each source's
// last taperRounds x round/taperDiv bytes are cut into chunks of at most
// chunk/taperDiv and placed with every budget divided by taperDiv
// (reshard.Builder.AddTapered), after all the other chunks; the rounds
// before them are full, so the network stays as busy as before while the
// full rounds' fan-out runs beside the tapered rounds, and what is left
// after the last network byte is the fan-out of the tapered rounds, a
// taperDiv-th of before.
const (
	taperDiv    = 4
	taperRounds = 2
	// taperWindow: a source's tapered items are chosen among its last
	// taperWindow times as many bytes (taper.cut).
	taperWindow = 4
)

// taper is the end of one schedule's last group of chains: div > 1 cuts
// each source's last bytes chunks into pieces of at most piece bytes. The
// zero taper (div 0) leaves every chunk as it is.
type taper struct {
	div   int64
	bytes int64 // per source: the bytes of its last chunks that are tapered
	piece int64
}

// newTaper returns the taper of a schedule with this round budget and
// chunk size (hier's chunk: at most the network receive budget).
func newTaper(round, chunk int64) taper {
	return taper{div: taperDiv, bytes: taperRounds * round / taperDiv, piece: max(chunk/taperDiv, 1)}
}

// cut returns the sources' items (qs[s], in order) as the ones added
// whole and the tapered ones. Each source tapers about t.bytes of the
// items near its end (the last taperWindow x t.bytes): sources in turn,
// one item at a time, each the candidate whose first receiver (the entry
// leader) has the fewest tapered bytes so far (ties to the later item),
// so that the tapered rounds reach many receivers and the sources' last
// chunks, which the turns send to the same few leaders, do not meet on
// one NIC in. A source stops once its next item would pass t.bytes (it
// tapers at least one). The tapered items are cut into pieces of at most
// t.piece, and their extra messages (one per hop and per replica a leader
// fans out to, for each piece past a chunk's first) declared to b
// (Builder.Expect), which fails past reshard.MaxMessages.
func (t taper) cut(b *reshard.Builder, chains []chain, qs [][]item) (body, tail [][]item, err error) {
	if t.div <= 1 {
		return qs, make([][]item, len(qs)), nil
	}
	bytesOf := func(it item) int64 { return it.sub.Elems() * chains[it.chain].elem }
	entryLeader := func(it item) int { return chains[it.chain].hops[0].leader }
	// a source's candidates by entry leader: each leader's untaken
	// candidates (indices into taken, ascending), so that a pick looks at
	// each leader's last one rather than at every candidate
	type cand struct {
		from    int    // the first candidate item
		taken   []bool // per candidate, from on
		leaders []int  // the candidates' entry leaders, first seen first
		untaken [][]int
		sum     int64
		done    bool
	}
	cs := make([]cand, len(qs))
	ranks := 0 // past the largest entry leader
	for si, q := range qs {
		k, sum := len(q), int64(0)
		for k > 0 && (k == len(q) || sum+bytesOf(q[k-1]) <= taperWindow*t.bytes) {
			sum += bytesOf(q[k-1])
			k--
		}
		c := cand{from: k, taken: make([]bool, len(q)-k), done: len(q) == 0}
		at := map[int]int{}
		for j, it := range q[k:] {
			l := entryLeader(it)
			ranks = max(ranks, l+1)
			i, ok := at[l]
			if !ok {
				i = len(c.leaders)
				at[l] = i
				c.leaders = append(c.leaders, l)
				c.untaken = append(c.untaken, nil)
			}
			c.untaken[i] = append(c.untaken[i], j)
		}
		cs[si] = c
	}
	load := make([]int64, ranks) // tapered bytes per entry leader
	for left := true; left; {
		left = false
		for si, q := range qs {
			c := &cs[si]
			if c.done {
				continue
			}
			// the candidate whose leader has the fewest tapered bytes, ties
			// to the later candidate: each leader's last untaken one
			best, bi := -1, -1
			for i, l := range c.leaders {
				u := c.untaken[i]
				if len(u) == 0 {
					continue
				}
				j := u[len(u)-1]
				if best < 0 || load[l] < load[c.leaders[bi]] || (load[l] == load[c.leaders[bi]] && j > best) {
					best, bi = j, i
				}
			}
			if best < 0 || (c.sum > 0 && c.sum+bytesOf(q[c.from+best]) > t.bytes) {
				c.done = true
				continue
			}
			it := q[c.from+best]
			c.taken[best] = true
			c.untaken[bi] = c.untaken[bi][:len(c.untaken[bi])-1]
			c.sum += bytesOf(it)
			load[entryLeader(it)] += bytesOf(it)
			left = true
		}
	}
	body, tail = make([][]item, len(qs)), make([][]item, len(qs))
	var extra int64
	for si, q := range qs {
		c := &cs[si]
		body[si] = q[:c.from]
		for j, tk := range c.taken {
			it := q[c.from+j]
			if !tk {
				body[si] = append(body[si], it)
				continue
			}
			parts, err := reshard.SplitBox(it.sub, chains[it.chain].elem, t.piece)
			if err != nil {
				return nil, nil, err
			}
			extra += int64(len(parts)-1) * chains[it.chain].messagesPerChunk()
			for _, p := range parts {
				tail[si] = append(tail[si], item{chain: it.chain, sub: p})
			}
		}
	}
	return body, tail, b.Expect(extra)
}
