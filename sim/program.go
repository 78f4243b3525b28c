package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/reshard"
)

// simProgram is what a simulation executes: messages, and for every process
// (one executor on one rank) its rounds of them, in the executor's order.
// It is built from schedules by AddSchedule, the one place that reads a
// reshard.Schedule, so that another source of per-rank rounds (a compiled
// per-rank program) can feed the simulator through a constructor of its
// own. A simProgram is read-only once built and may be run many times.
type simProgram struct {
	world  int
	msgs   []simMsg
	procs  []simProc
	pool   []int32 // message indices of every round, by process
	parts  []programPart
	tensor []string // tensor names, by global tensor index
	extra  []extraTensor
}

// simMsg is one message of a program, in global ranks.
type simMsg struct {
	Src, Dst int32
	Bytes    int64
	Class    reshard.LinkClass
	// Pack says the sender packs the message into staging before the send
	// (its regions are not one contiguous run, and the transport does not
	// move strided regions in place); Unpack says the receiver scatters it
	// out of staging after the round.
	Pack, Unpack bool
	// Tensor is the global tensor index (over every part).
	Tensor int32
	Round  int32
	Part   int32
	// Index is the message's index in its part's schedule (the first one
	// when several coalesced), Parts how many schedule messages it carries.
	Index, Parts int32
}

// extraTensor records that a coalesced message also carries a tensor other
// than its first part's.
type extraTensor struct {
	msg, tensor int32
}

// simProc is one executor: the rounds one rank runs for one part.
type simProc struct {
	Rank int32
	Part int32
	// After is the process that must finish before this one starts (the
	// same rank's process of the part this part follows), or -1.
	After  int32
	rounds []procRound
}

// procRound is one round of one process; its messages lie in the program's
// pool at [Lo, Lo+Copies+Recvs+Sends): local copies, then receives, then
// sends, each in schedule order.
type procRound struct {
	Round                int32
	Lo                   int32
	Copies, Recvs, Sends int32
}

// programPart is one schedule added to a program.
type programPart struct {
	Name   string `json:"name"`
	Route  string `json:"route"`
	Rounds int    `json:"rounds"`
	// Messages are the part's messages: [First, First+Messages).
	First    int `json:"first_message"`
	Messages int `json:"messages"`
	// Tensors are the part's tensors: [FirstTensor, FirstTensor+Tensors).
	FirstTensor int `json:"first_tensor"`
	Tensors     int `json:"tensors"`
	// After is the part this one follows on the ranks they share, or -1.
	After int `json:"after"`
}

// newSimProgram starts an empty program over world ranks (GPUs).
func newSimProgram(world int) *simProgram { return &simProgram{world: world} }

// World returns the number of ranks.
func (p *simProgram) World() int { return p.world }

// Messages returns the messages (do not modify).
func (p *simProgram) Messages() []simMsg { return p.msgs }

// Procs returns the processes (do not modify).
func (p *simProgram) Procs() []simProc { return p.procs }

// Parts returns the parts in the order they were added.
func (p *simProgram) Parts() []programPart { return p.parts }

// TensorName returns the name of global tensor i.
func (p *simProgram) TensorName(i int) string { return p.tensor[i] }

// Tensors returns the number of tensors over all parts.
func (p *simProgram) Tensors() int { return len(p.tensor) }

// Rounds returns process i's rounds (do not modify).
func (p *simProgram) Rounds(i int) []procRound { return p.procs[i].rounds }

// RoundMessages returns the message indices of round r of a process: copies,
// receives and sends (do not modify).
func (p *simProgram) RoundMessages(r procRound) (copies, recvs, sends []int32) {
	a := p.pool[r.Lo : r.Lo+r.Copies]
	b := p.pool[r.Lo+r.Copies : r.Lo+r.Copies+r.Recvs]
	c := p.pool[r.Lo+r.Copies+r.Recvs : r.Lo+r.Copies+r.Recvs+r.Sends]
	return a, b, c
}

// addOptions say how a schedule joins a program.
type addOptions struct {
	// Name names the part in reports ("stage 0"); empty uses the route.
	Name string
	// Ranks maps the schedule's ranks to the program's: Ranks[r] is the
	// global rank of schedule rank r. Nil is the identity. A pipeline
	// stage's communicator holds that stage's trainers and every generator.
	Ranks []int
	// InPlace says the transport moves a strided region (one segment) in
	// place, as MPI derived datatypes do, so only multi-segment messages
	// are packed; false packs every message that is not one contiguous
	// run (NCCL's kernels).
	InPlace bool
	// CoalesceBytes makes the messages of one round between one pair of
	// ranks that are at most this large travel as one message, packed on
	// both sides, as program.Compile's CoalesceBytes does; 0 keeps every
	// message on its own.
	CoalesceBytes int64
	// After is the part this one follows: each rank's process of this part
	// starts when the same rank's process of part After finishes. -1 runs
	// the parts concurrently (each rank then runs one executor per part).
	After int
}

// AddSchedule appends a schedule's messages and per-rank rounds to the
// program and returns the part's index. Every rank's rounds follow the
// compiled program the host driver runs (program.Compile): in round order,
// each round's local copies, receives and sends (messages where Src == Dst
// are local copies), small messages of a pair coalesced when
// o.CoalesceBytes asks. Link classes are kept from the schedule; runProgram checks
// them against the cluster placement. It walks the schedule once, whatever
// the number of ranks.
func (p *simProgram) AddSchedule(s *reshard.Schedule, o addOptions) (int, error) {
	global, err := p.checkAdd(s, o)
	if err != nil {
		return 0, err
	}
	part := len(p.parts)
	name := o.Name
	if name == "" {
		name = s.Route
	}
	first, firstTensor := len(p.msgs), len(p.tensor)
	for i := range s.Plans {
		n := fmt.Sprintf("tensor %d", i)
		if i < len(s.TensorNames) && s.TensorNames[i] != "" {
			n = s.TensorNames[i]
		}
		if len(s.Plans) == 1 && len(s.TensorNames) == 0 {
			n = name
		}
		p.tensor = append(p.tensor, n)
	}
	ents, err := p.addMessages(s, o, part, firstTensor, global)
	if err != nil {
		return 0, err
	}
	p.addProcs(ents, part, o.After, global)
	p.parts = append(p.parts, programPart{Name: name, Route: s.Route, Rounds: s.Rounds, First: first, Messages: len(s.Messages),
		FirstTensor: firstTensor, Tensors: len(s.Plans), After: o.After})
	return part, nil
}

// checkAdd checks that schedule s can join the program as o says and
// returns the map from its ranks to the program's.
func (p *simProgram) checkAdd(s *reshard.Schedule, o addOptions) (func(int) int32, error) {
	world := s.World
	if o.Ranks != nil && len(o.Ranks) != world {
		return nil, fmt.Errorf("sim: %d ranks mapped for a schedule of %d", len(o.Ranks), world)
	}
	global := func(r int) int32 {
		if o.Ranks == nil {
			return int32(r)
		}
		return int32(o.Ranks[r])
	}
	for r := 0; r < world; r++ {
		if g := global(r); g < 0 || int(g) >= p.world {
			return nil, fmt.Errorf("sim: schedule rank %d maps to rank %d, outside the program's %d ranks", r, g, p.world)
		}
	}
	if o.After < -1 || o.After >= len(p.parts) {
		return nil, fmt.Errorf("sim: part %d follows part %d, which does not exist", len(p.parts), o.After)
	}
	if len(p.msgs)+len(s.Messages) > math.MaxInt32 || len(p.pool)+2*len(s.Messages) > math.MaxInt32 {
		return nil, fmt.Errorf("sim: %d messages exceed the simulator's limit of %d", len(p.msgs)+len(s.Messages), math.MaxInt32)
	}
	return global, nil
}

// rankEntry is one of a rank's operations on a message of the program:
// kind 0 a local copy, 1 a receive, 2 a send.
type rankEntry struct {
	msg  int32
	kind uint8
}

// addMessages walks the schedule once, making the program's messages (a
// round's small messages between one pair coalesced into one, as Compile
// does) and returns each schedule rank's entries, in schedule order.
func (p *simProgram) addMessages(s *reshard.Schedule, o addOptions, part, firstTensor int, global func(int) int32) ([][]rankEntry, error) {
	world := s.World
	direct := func(segs []reshard.Segment) bool {
		if len(segs) != 1 {
			return false
		}
		return segs[0].At.Contiguous() || o.InPlace
	}
	ents := make([][]rankEntry, world)
	p.msgs = slices.Grow(p.msgs, len(s.Messages))
	p.pool = slices.Grow(p.pool, 2*len(s.Messages))
	type pair struct{ src, dst int }
	var co map[pair]int32 // the round's coalesced message of each pair
	round := -1
	for i := range s.Messages {
		m := &s.Messages[i]
		if m.Bytes < 0 {
			return nil, fmt.Errorf("sim: message %d has %d bytes", i, m.Bytes)
		}
		if m.Src < 0 || m.Src >= world || m.Dst < 0 || m.Dst >= world || m.Tensor < 0 || m.Tensor >= len(s.Plans) {
			return nil, fmt.Errorf("sim: message %d goes from rank %d to rank %d of tensor %d, outside a schedule of %d ranks and %d tensors",
				i, m.Src, m.Dst, m.Tensor, world, len(s.Plans))
		}
		if m.Round != round {
			round = m.Round
			clear(co)
		}
		tensor := int32(firstTensor + m.Tensor)
		if o.CoalesceBytes > 0 && m.Src != m.Dst && m.Bytes <= o.CoalesceBytes {
			if co == nil {
				co = map[pair]int32{}
			}
			if k, ok := co[pair{m.Src, m.Dst}]; ok {
				pm := &p.msgs[k]
				sum, ok := checked.Add(pm.Bytes, m.Bytes)
				if !ok {
					return nil, fmt.Errorf("sim: coalesced messages of round %d from rank %d to %d overflow int64 bytes", m.Round, m.Src, m.Dst)
				}
				pm.Bytes = sum
				pm.Pack, pm.Unpack, pm.Parts = true, true, pm.Parts+1
				if pm.Tensor != tensor {
					p.extra = append(p.extra, extraTensor{msg: k, tensor: tensor})
				}
				continue
			}
			co[pair{m.Src, m.Dst}] = int32(len(p.msgs))
		}
		gi := int32(len(p.msgs))
		p.msgs = append(p.msgs, simMsg{Src: global(m.Src), Dst: global(m.Dst), Bytes: m.Bytes, Class: m.Class,
			Pack: m.Src != m.Dst && m.Bytes > 0 && !direct(m.From), Unpack: m.Src != m.Dst && m.Bytes > 0 && !direct(m.To),
			Tensor: tensor, Round: int32(m.Round), Part: int32(part), Index: int32(i), Parts: 1})
		if m.Src == m.Dst {
			ents[m.Src] = append(ents[m.Src], rankEntry{gi, 0})
			continue
		}
		ents[m.Src] = append(ents[m.Src], rankEntry{gi, 2})
		ents[m.Dst] = append(ents[m.Dst], rankEntry{gi, 1})
	}
	return ents, nil
}

// addProcs adds a process of the part for every rank with entries: its
// rounds in order, each round's copies, then receives, then sends. With
// after >= 0 a rank's process follows its process of part after.
func (p *simProgram) addProcs(ents [][]rankEntry, part, after int, global func(int) int32) {
	var prev map[int32]int32
	if after >= 0 {
		prev = map[int32]int32{}
		for i, pr := range p.procs {
			if int(pr.Part) == after {
				prev[pr.Rank] = int32(i)
			}
		}
	}
	for r, es := range ents {
		ents[r] = nil
		if len(es) == 0 {
			continue
		}
		pr := simProc{Rank: global(r), Part: int32(part), After: -1}
		if q, ok := prev[pr.Rank]; ok {
			pr.After = q
		}
		for lo := 0; lo < len(es); {
			round := p.msgs[es[lo].msg].Round
			hi := lo
			for hi < len(es) && p.msgs[es[hi].msg].Round == round {
				hi++
			}
			rd := procRound{Round: round, Lo: int32(len(p.pool))}
			for kind := uint8(0); kind < 3; kind++ {
				for _, e := range es[lo:hi] {
					if e.kind == kind {
						p.pool = append(p.pool, e.msg)
						switch kind {
						case 0:
							rd.Copies++
						case 1:
							rd.Recvs++
						default:
							rd.Sends++
						}
					}
				}
			}
			pr.rounds = append(pr.rounds, rd)
			lo = hi
		}
		p.procs = append(p.procs, pr)
	}
}

// programOf is a program of one schedule on its own ranks.
func programOf(s *reshard.Schedule, inPlace bool) (*simProgram, error) {
	p := newSimProgram(s.World)
	if _, err := p.AddSchedule(s, addOptions{InPlace: inPlace, After: -1}); err != nil {
		return nil, err
	}
	return p, nil
}
