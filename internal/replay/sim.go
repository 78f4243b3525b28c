package replay

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Memory performs a simulated rank's copies: one batch item, or a
// contiguous memcpy (also a matched send and receive, between ranks that
// share one address space in a simulation).
type Memory interface {
	Copy(c Copy) error
	Memcpy(dst, src uint64, n int64) error
	// Quantize runs one quantize-while-packing of tensor t (its scales in
	// the memory at t.Scales).
	Quantize(t QuantTensor, q QuantOp) error
	// Fuse runs the one-pass quantize of whole blocks of self-scaled
	// tensor t (a Fuse command), writing their scales at t.Scales.
	Fuse(t QuantTensor, q QuantOp) error
	// Check writes at flag the largest magnitude among the n/4 float32s
	// at src, as float32 bits (a Check command).
	Check(src uint64, n int64, flag uint64) error
}

// Simulate runs plans on the CPU as the streams of a GPU would run them,
// with every rank's streams (compute, network, local, the side ones) advancing in an
// order chosen at random by r among everything that may run: a stream's
// next command once what it waits for is done (a Wait binds to the last
// Record of its event queued before it on the same rank, as
// cuStreamWaitEvent does), each item of a launched batch separately, each
// matched pair of a send and a receive separately (NCCL's matching: per
// communicator, sender and receiver, in posting order), a group finishing
// once all of its operations have. ranks[r] are the plans rank r queues,
// in order (several steps in a row). It returns the first memory error, or
// a deadlock naming every stream's next command, or nil once every command
// ran, or an error when a stream's work does not join the compute stream
// by the end (the host waits for that one alone). Any order it picks is one
// the real streams may take, so a plan that
// depends on an order its events do not enforce gives wrong bytes for some
// seeds.
func Simulate(ranks [][]*Plan, mem Memory, r *rand.Rand) error {
	s := &sim{mem: mem, r: r, queues: map[pairKey][2][]*simOp{}}
	for rank, plans := range ranks {
		var cmds []simCmd
		last := map[int]int{} // event -> host index of its last record
		for pi, p := range plans {
			for ci := range p.Cmds {
				c := &p.Cmds[ci]
				sc := simCmd{plan: p, cmd: c, bound: -1, label: fmt.Sprintf("rank %d run %d cmd %d (%s on %s, round %d)", rank, pi, ci, c.Kind, c.Stream, c.Round)}
				switch c.Kind {
				case Wait:
					if h, ok := last[c.Event]; ok {
						sc.bound = h
					}
				case Record:
					last[c.Event] = len(cmds)
				}
				cmds = append(cmds, sc)
			}
		}
		rs := &simRank{rank: rank, cmds: cmds}
		for h := range cmds {
			st := cmds[h].cmd.Stream
			rs.streams[st] = append(rs.streams[st], h)
		}
		// The host waits for the compute stream alone, so every other
		// stream must end in a record that the compute stream waits on
		// after it.
		for st, q := range rs.streams {
			if Stream(st) == Compute || len(q) == 0 {
				continue
			}
			last := q[len(q)-1]
			joined := cmds[last].cmd.Kind == Record
			if joined {
				joined = false
				for h := last + 1; h < len(cmds); h++ {
					if cmds[h].cmd.Stream == Compute && cmds[h].cmd.Kind == Wait && cmds[h].bound == last {
						joined = true
					}
				}
			}
			if !joined {
				return fmt.Errorf("replay: rank %d: the %s stream's last command (%s) does not join the compute stream", rank, Stream(st), cmds[last].label)
			}
		}
		s.ranks = append(s.ranks, rs)
	}
	for {
		acts := s.actions()
		if len(acts) == 0 {
			return s.finished()
		}
		if err := acts[s.r.IntN(len(acts))](); err != nil {
			return err
		}
	}
}

type simCmd struct {
	plan  *Plan
	cmd   *Cmd
	bound int // the record a Wait binds to, -1 none
	label string

	done    bool
	started bool
	order   int    // a batch's item order: 0 forward, 1 reverse, 2 random
	left    int    // items or operations not done yet
	items   []Copy // a started batch's items not yet copied
	ops     []*simOp
}

type simRank struct {
	rank    int
	cmds    []simCmd
	streams [Streams][]int // host indices by stream, in order
}

// simOp is one posted operation of a group.
type simOp struct {
	rank int
	cmd  *simCmd
	p2p  P2P
	done bool
}

// pairKey names the queue of one communicator from a sender to a receiver.
type pairKey struct {
	comm     Stream
	src, dst int
}

type sim struct {
	mem    Memory
	r      *rand.Rand
	ranks  []*simRank
	queues map[pairKey][2][]*simOp // [0] sends, [1] receives, unmatched, in order
	// matched pairs not yet transferred
	matched [][2]*simOp
}

func (s *sim) actions() []func() error {
	var acts []func() error
	for _, rs := range s.ranks {
		for st := range rs.streams {
			q := rs.streams[st]
			if len(q) == 0 {
				continue
			}
			h := q[0]
			c := &rs.cmds[h]
			pop := func() { c.done = true; rs.streams[st] = rs.streams[st][1:] }
			switch c.cmd.Kind {
			case Wait:
				if c.bound < 0 || rs.cmds[c.bound].done {
					acts = append(acts, func() error { pop(); return nil })
				}
			case Record:
				acts = append(acts, func() error { pop(); return nil })
			case Memcpy:
				acts = append(acts, func() error { pop(); return s.mem.Memcpy(c.cmd.Dst, c.cmd.Src, c.cmd.Len) })
			case Quantize:
				acts = append(acts, func() error { pop(); q := c.plan.Quants[c.cmd.Quant]; return s.mem.Quantize(c.plan.Quant[q.Tensor], q) })
			case Fuse:
				acts = append(acts, func() error { pop(); q := c.plan.Quants[c.cmd.Quant]; return s.mem.Fuse(c.plan.Quant[q.Tensor], q) })
			case Check:
				acts = append(acts, func() error { pop(); return s.mem.Check(c.cmd.Src, c.cmd.Len, c.cmd.Dst) })
			case Batch:
				if !c.started {
					acts = append(acts, func() error {
						c.started = true
						c.order = s.r.IntN(3)
						c.items = append([]Copy(nil), c.plan.Batches[c.cmd.Batch]...)
						if len(c.items) == 0 {
							pop()
						}
						return nil
					})
					continue
				}
				// items run in order, in reverse, or at random (the
				// order mode drawn when the batch started), so that two
				// items that must not share a launch come out in the
				// wrong order half of the time.
				for k := range c.items {
					switch c.order {
					case 0:
						if k > 0 {
							continue
						}
					case 1:
						if k < len(c.items)-1 {
							continue
						}
					}
					acts = append(acts, func() error {
						it := c.items[k]
						c.items = append(c.items[:k:k], c.items[k+1:]...)
						if len(c.items) == 0 {
							pop()
						}
						return s.mem.Copy(it)
					})
				}
			case Group:
				if !c.started {
					acts = append(acts, func() error {
						c.started = true
						c.left = len(c.cmd.Ops)
						if c.left == 0 {
							pop()
						}
						for _, o := range c.cmd.Ops {
							op := &simOp{rank: rs.rank, cmd: c, p2p: o}
							k := pairKey{comm: c.cmd.Stream, src: rs.rank, dst: o.Peer}
							side := 0
							if !o.Send {
								k.src, k.dst, side = o.Peer, rs.rank, 1
							}
							qs := s.queues[k]
							qs[side] = append(qs[side], op)
							if len(qs[0]) > 0 && len(qs[1]) > 0 {
								s.matched = append(s.matched, [2]*simOp{qs[0][0], qs[1][0]})
								qs[0], qs[1] = qs[0][1:], qs[1][1:]
							}
							s.queues[k] = qs
						}
						return nil
					})
				}
				// a started group finishes when its last operation does
				// (see the transfers below).
			}
		}
	}
	for i := range s.matched {
		acts = append(acts, func() error {
			m := s.matched[i]
			s.matched = append(s.matched[:i:i], s.matched[i+1:]...)
			snd, rcv := m[0], m[1]
			if snd.p2p.Len != rcv.p2p.Len {
				return fmt.Errorf("replay: rank %d sends %d bytes to rank %d, which receives %d (%s; %s)",
					snd.rank, snd.p2p.Len, rcv.rank, rcv.p2p.Len, snd.cmd.label, rcv.cmd.label)
			}
			if err := s.mem.Memcpy(rcv.p2p.Addr, snd.p2p.Addr, snd.p2p.Len); err != nil {
				return err
			}
			for _, o := range m {
				o.done = true
				o.cmd.left--
				if o.cmd.left == 0 {
					s.finishGroup(o.cmd)
				}
			}
			return nil
		})
	}
	return acts
}

// finishGroup pops a group whose operations are all done off its stream.
func (s *sim) finishGroup(c *simCmd) {
	for _, rs := range s.ranks {
		for st := range rs.streams {
			if q := rs.streams[st]; len(q) > 0 && &rs.cmds[q[0]] == c {
				c.done = true
				rs.streams[st] = q[1:]
				return
			}
		}
	}
}

// finished returns nil when every stream ran out, else the deadlock.
func (s *sim) finished() error {
	var stuck []string
	for _, rs := range s.ranks {
		for st := range rs.streams {
			if q := rs.streams[st]; len(q) > 0 {
				c := &rs.cmds[q[0]]
				what := c.label
				if c.cmd.Kind == Wait && c.bound >= 0 {
					what += " waits for " + rs.cmds[c.bound].label
				}
				if c.cmd.Kind == Group {
					what += fmt.Sprintf(" with %d of %d operations unmatched", c.left, len(c.cmd.Ops))
				}
				stuck = append(stuck, what)
			}
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	return fmt.Errorf("replay: simulated streams deadlock: %s", strings.Join(stuck, "; "))
}
