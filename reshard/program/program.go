// Package program compiles one rank's part of a reshard.Schedule into a
// Program: for every round, its local copies and the wire operations it
// posts, with views applied, small messages between a pair coalesced and
// staging offsets fixed. A Program is pure data (Compile communicates with
// no one); package refit's drivers run it every step, the GPU replay
// driver lowers it to one launch, and the simulator replays it.
package program

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
)

// Program is one rank's part of a Schedule, compiled once so that running
// it every step only follows it: for every round in which the rank has
// work, its local copies and the wire operations it posts, each a send to
// or a receive from one peer that carries one message, or several small
// ones coalesced, with where every byte comes from and goes to in this
// rank's buffers (its views applied) and where it sits in staging. A
// Program is pure data: Compile derives it with no communication, it can
// be printed (WriteTo) and compared in golden tests, and a refit.Driver
// runs it over a transport.Transport and a transport.Memory.
type Program struct {
	Rank, World int
	Route       string
	Rounds      []Round
	// Staging[slot][dir] is the most staging a round of slot (round mod 2)
	// needs for its sends (dir 0) and its receives (dir 1), in bytes.
	Staging [2][2]int64
	// Full[t] is the size of tensor t's whole-tensor scratch on this rank
	// (BufFull), 0 when the rank needs none.
	Full []int64
	// Messages counts the schedule messages this rank sends, receives or
	// copies.
	Messages int
	// Done[t] is the index in Rounds of the round after which this rank has moved
	// every byte of tensor t it takes part in (-1: none), for progress.
	Done []int

	sched *reshard.Schedule
}

// Round is what a rank does in one round of the schedule: its local copies
// (done first), then its receives and sends, posted together.
type Round struct {
	Index        int
	Copies       []Copy
	Recvs, Sends []Wire
}

// Copy is a message from the rank to itself. With Quant set it converts:
// From is the one source region (in the source dtype) of message Msg's
// box, which the copy quantizes to FP8 E4M3 into To (Bytes counts the
// FP8 bytes).
type Copy struct {
	Msg      int32
	Bytes    int64
	From, To []Region
	Quant    bool
}

// Region is a strided region of one of this rank's buffers of one tensor.
type Region struct {
	Tensor int32
	Buf    reshard.BufKind
	At     strided.Desc
}

// WireMode says where a wire operation's bytes live.
type WireMode uint8

const (
	// WireDirect moves one contiguous run of a tensor buffer as it is.
	WireDirect WireMode = iota
	// WireInPlace moves one strided region of a tensor buffer, which the
	// transport sends from or receives into without staging
	// (InPlaceTransport).
	WireInPlace
	// WireStaged moves bytes packed into, or to be unpacked from, the
	// round's staging buffer at StagingOff.
	WireStaged
)

var wireModeNames = [...]string{WireDirect: "direct", WireInPlace: "in-place", WireStaged: "staged"}

func (m WireMode) String() string {
	if int(m) < len(wireModeNames) {
		return wireModeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Wire is one point-to-point operation of a round: a send to or a receive
// from Peer of Bytes bytes. It carries the messages in Parts, in order
// (more than one when small messages between the pair coalesce); its bytes
// are Region itself (WireDirect, WireInPlace) or Parts' regions packed one
// after another at StagingOff of the round's staging (WireStaged).
type Wire struct {
	Peer       int
	Class      reshard.LinkClass
	Bytes      int64
	Mode       WireMode
	Region     Region
	StagingOff int64
	Parts      []Part
}

// Part is one message of a wire operation: the regions the sender reads
// (for a send) or the receiver writes (for a receive), in byte order. A
// send's part with Quant set converts: Regions is the one source region
// (in the source dtype) of message Msg's box, which the sender quantizes
// into its staging as FP8 E4M3 (one byte per element); such a send is
// always staged.
type Part struct {
	Msg     int32
	Regions []Region
	Quant   bool
}

// TensorViews are where one rank's parts of one tensor sit in its buffers.
// The zero value is the default: each part dense in a buffer of its own.
type TensorViews struct {
	Src, Dst placement.View
}

// CompileOptions configure Compile. Every rank of a call must use the same
// CoalesceBytes (it changes which operations pair up); Views and
// MaxInPlace are this rank's own.
type CompileOptions struct {
	// Views holds this rank's views per tensor of the schedule; nil or a
	// shorter list leaves the rest dense.
	Views []TensorViews
	// MaxInPlace is the largest strided region the transport moves in
	// place (MaxInPlace of the transport); 0 stages every strided region.
	MaxInPlace int64
	// CoalesceBytes makes the messages of one round between one pair of
	// ranks that are at most this large travel as one operation, packed
	// through staging; 0 sends every message on its own.
	CoalesceBytes int64
}

// Compile derives rank's Program from a schedule. It fails when a view
// does not fit its tensor's part on this rank.
func Compile(s *reshard.Schedule, rank int, opts CompileOptions) (*Program, error) {
	if rank < 0 || rank >= s.World {
		return nil, fmt.Errorf("reshard: rank %d outside a schedule of %d ranks", rank, s.World)
	}
	c := compiler{s: s, rank: rank, opts: opts}
	if err := c.resolveViews(); err != nil {
		return nil, err
	}
	p := &Program{Rank: rank, World: s.World, Route: s.Route, Full: make([]int64, len(s.Plans)), sched: s}
	p.Done = make([]int, len(s.Plans))
	for t := range p.Done {
		p.Done[t] = -1
	}
	// staged[dir] is the staging offset the current round has reached.
	var cur *Round
	var staged [2]int64
	done := map[[2]int]bool{} // (peer, dir) coalesced in the current round
	flush := func() {
		if cur == nil {
			return
		}
		slot := cur.Index % 2
		for dir := range staged {
			p.Staging[slot][dir] = max(p.Staging[slot][dir], staged[dir])
		}
		p.Rounds = append(p.Rounds, *cur)
	}
	for i := range s.Messages {
		m := &s.Messages[i]
		if m.Src != rank && m.Dst != rank {
			continue
		}
		p.Messages++
		if cur == nil || cur.Index != m.Round {
			flush()
			cur = &Round{Index: m.Round}
			staged = [2]int64{}
			clear(done)
		}
		p.Done[m.Tensor] = len(p.Rounds)
		quant, err := c.quantizes(m)
		if err != nil {
			return nil, err
		}
		if m.Src == m.Dst {
			from, err := c.regions(m, m.From)
			if err != nil {
				return nil, err
			}
			to, err := c.regions(m, m.To)
			if err != nil {
				return nil, err
			}
			c.noteFull(p, from, to)
			cur.Copies = append(cur.Copies, Copy{Msg: int32(i), Bytes: m.Bytes, From: from, To: to, Quant: quant})
			continue
		}
		dir, peer, segs := 0, m.Dst, m.From
		if m.Dst == rank {
			dir, peer, segs = 1, m.Src, m.To
		}
		if c.coalesces(m) {
			if done[[2]int{peer, dir}] {
				continue // already carried by the round's coalesced operation
			}
			done[[2]int{peer, dir}] = true
			w, err := c.coalesced(i, dir, peer)
			if err != nil {
				return nil, err
			}
			if w.Mode == WireStaged {
				w.StagingOff = staged[dir]
				staged[dir] += w.Bytes
			}
			for _, pt := range w.Parts {
				c.noteFull(p, pt.Regions)
			}
			appendWire(cur, dir, w)
			continue
		}
		regs, err := c.regions(m, segs)
		if err != nil {
			return nil, err
		}
		c.noteFull(p, regs)
		w := c.single(int32(i), m, peer, regs, quant && dir == 0)
		if w.Mode == WireStaged {
			w.StagingOff = staged[dir]
			staged[dir] += w.Bytes
		}
		appendWire(cur, dir, w)
	}
	flush()
	return p, nil
}

func appendWire(st *Round, dir int, w Wire) {
	if dir == 0 {
		st.Sends = append(st.Sends, w)
	} else {
		st.Recvs = append(st.Recvs, w)
	}
}

// compiler holds what Compile needs while it walks the schedule.
type compiler struct {
	s     *reshard.Schedule
	rank  int
	opts  CompileOptions
	views []TensorViews
	local [][2]placement.Box // per tensor: this rank's source and destination box
	dense [][2]bool          // per tensor and side: the view is the default
}

// resolveViews checks this rank's views against its parts.
func (c *compiler) resolveViews() error {
	n := len(c.s.Plans)
	c.views = make([]TensorViews, n)
	copy(c.views, c.opts.Views)
	c.local = make([][2]placement.Box, n)
	c.dense = make([][2]bool, n)
	for t, p := range c.s.Plans {
		for side, l := range []placement.Layout{p.Src(), p.Dst()} {
			v := c.views[t].Src
			if side == 1 {
				v = c.views[t].Dst
			}
			c.dense[t][side] = v.Dense()
			box, ok := l.RankBox(c.rank)
			if !ok {
				if !v.Dense() {
					return &ViewError{Rank: c.rank, Tensor: c.s.TensorName(t), Side: SideName(side), View: v,
						Why: "is given but the rank holds no part on this side"}
				}
				continue
			}
			c.local[t][side] = box
			if err := v.Validate(box.Shape()); err != nil {
				return &ViewError{Rank: c.rank, Tensor: c.s.TensorName(t), Side: SideName(side), View: v, Why: err.Error()}
			}
		}
	}
	return nil
}

func SideName(side int) string {
	if side == 0 {
		return "source"
	}
	return "destination"
}

// regions resolves a message's segments on this rank, applying views. A
// segment of a tensor buffer covers the message's box (every route builds
// them so); its descriptor is re-derived for a non-default view.
func (c *compiler) regions(m *reshard.Message, segs []reshard.Segment) ([]Region, error) {
	out := make([]Region, len(segs))
	for k, sg := range segs {
		r := Region{Tensor: int32(sg.Tensor), Buf: sg.Buf, At: sg.At}
		side := -1
		switch sg.Buf {
		case reshard.BufSrc:
			side = 0
		case reshard.BufDst:
			side = 1
		}
		if side >= 0 && !c.dense[sg.Tensor][side] {
			v := c.views[sg.Tensor].Src
			if side == 1 {
				v = c.views[sg.Tensor].Dst
			}
			elem := c.s.Plans[sg.Tensor].Src().ElemSize()
			if side == 1 {
				elem = c.s.Plans[sg.Tensor].Dst().ElemSize()
			}
			if len(segs) != 1 || m.Box.Elems()*elem != sg.At.Bytes() {
				return nil, fmt.Errorf("reshard: a message of tensor %s in round %d: a segment in a viewed buffer must cover the message's box", c.s.TensorName(sg.Tensor), m.Round)
			}
			r.At = strided.DescribeView(c.local[sg.Tensor][side], m.Box, elem, v)
		}
		out[k] = r
	}
	return out, nil
}

// noteFull records the whole-tensor scratch the regions use.
func (c *compiler) noteFull(p *Program, lists ...[]Region) {
	for _, l := range lists {
		for _, r := range l {
			if r.Buf == reshard.BufFull {
				p.Full[r.Tensor] = c.s.Plans[r.Tensor].Src().Bytes()
			}
		}
	}
}

// quantizes reports whether the sender of m converts what it reads: m
// reads the source buffer of a tensor that converts to FP8 (its other
// hops, between destinations, carry FP8 bytes as they are). Such a
// message must read one region covering its box.
func (c *compiler) quantizes(m *reshard.Message) (bool, error) {
	q := false
	for _, sg := range m.From {
		if sg.Buf == reshard.BufSrc && c.s.Plans[sg.Tensor].Converts() {
			q = true
		}
	}
	if q && (len(m.From) != 1 || m.From[0].Tensor != m.Tensor) {
		return false, fmt.Errorf("reshard: a message of tensor %s in round %d converts to FP8 but reads %d regions (want one region of its box)",
			c.s.TensorName(m.Tensor), m.Round, len(m.From))
	}
	return q, nil
}

// coalesces reports whether m travels in its round's coalesced operation
// between its pair: it is small, and another small message of the same
// round shares the pair (both sides see the same, from the schedule
// alone).
func (c *compiler) coalesces(m *reshard.Message) bool {
	return c.opts.CoalesceBytes > 0 && m.Bytes <= c.opts.CoalesceBytes && m.Src != m.Dst
}

// coalesced builds the operation that carries every small message of
// message first's round between its pair, in schedule order.
func (c *compiler) coalesced(first, dir, peer int) (Wire, error) {
	s := c.s
	m0 := &s.Messages[first]
	w := Wire{Peer: peer, Class: m0.Class}
	for i := first; i < len(s.Messages) && s.Messages[i].Round == m0.Round; i++ {
		m := &s.Messages[i]
		if m.Src != m0.Src || m.Dst != m0.Dst || !c.coalesces(m) {
			continue
		}
		segs := m.From
		if dir == 1 {
			segs = m.To
		}
		regs, err := c.regions(m, segs)
		if err != nil {
			return w, err
		}
		quant, err := c.quantizes(m)
		if err != nil {
			return w, err
		}
		w.Parts = append(w.Parts, Part{Msg: int32(i), Regions: regs, Quant: quant && dir == 0})
		w.Bytes += m.Bytes
	}
	if len(w.Parts) == 1 {
		return c.single(w.Parts[0].Msg, m0, peer, w.Parts[0].Regions, w.Parts[0].Quant), nil
	}
	w.Mode = WireStaged
	return w, nil
}

// single builds the operation of one message: straight from the buffer
// when its bytes are one run, in place when the transport can move the
// strided region, else through staging. A send that quantizes is always
// staged: its bytes exist only once packed.
func (c *compiler) single(msg int32, m *reshard.Message, peer int, regs []Region, quant bool) Wire {
	w := Wire{Peer: peer, Class: m.Class, Bytes: m.Bytes, Parts: []Part{{Msg: msg, Regions: regs, Quant: quant}}}
	switch {
	case quant:
		w.Mode = WireStaged
	case len(regs) == 1 && regs[0].At.Contiguous():
		w.Mode, w.Region = WireDirect, regs[0]
	case len(regs) == 1 && m.Bytes > 0 && m.Bytes <= c.opts.MaxInPlace:
		w.Mode, w.Region = WireInPlace, regs[0]
	default:
		w.Mode = WireStaged
	}
	return w
}

// Moved returns what the rank moves in one run of the program: the bytes
// it sends, receives and copies, and the tensors it takes part in.
func (p *Program) Moved() (bytes int64, tensors int) {
	for i := range p.Rounds {
		s := &p.Rounds[i]
		for _, cp := range s.Copies {
			bytes += cp.Bytes
		}
		for _, list := range [][]Wire{s.Sends, s.Recvs} {
			for _, w := range list {
				bytes += w.Bytes
			}
		}
	}
	for _, k := range p.Done {
		if k >= 0 {
			tensors++
		}
	}
	return bytes, tensors
}

// PeersOf returns the distinct peers of Rounds[i], sorted, for errors.
func (p *Program) PeersOf(i int) []int { return p.Rounds[i].Peers() }

// TensorsOf returns the names of the tensors Rounds[i]'s operations carry,
// for errors.
func (p *Program) TensorsOf(i int) []string {
	var out []string
	if p.sched == nil {
		return nil
	}
	s := &p.Rounds[i]
	for _, list := range [][]Wire{s.Sends, s.Recvs} {
		for _, w := range list {
			for _, pt := range w.Parts {
				t := p.sched.TensorName(int(p.sched.Messages[pt.Msg].Tensor))
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// Schedule returns the schedule the program was compiled from.
func (p *Program) Schedule() *reshard.Schedule { return p.sched }

// Wires counts the program's send and receive operations.
func (p *Program) Wires() (sends, recvs int) {
	for i := range p.Rounds {
		sends += len(p.Rounds[i].Sends)
		recvs += len(p.Rounds[i].Recvs)
	}
	return sends, recvs
}

// WriteTo renders the program as text, one line per operation, for
// golden tests and debugging.
func (p *Program) WriteTo(w io.Writer) (int64, error) {
	ew := &countWriter{w: w}
	fmt.Fprintf(ew, "rank %d of %d, route %s, %d messages, %d rounds\n", p.Rank, p.World, p.Route, p.Messages, len(p.Rounds))
	fmt.Fprintf(ew, "staging: even rounds send %d recv %d, odd rounds send %d recv %d\n",
		p.Staging[0][0], p.Staging[0][1], p.Staging[1][0], p.Staging[1][1])
	for t, n := range p.Full {
		if n > 0 {
			fmt.Fprintf(ew, "scratch: tensor %s %d bytes\n", p.sched.TensorName(t), n)
		}
	}
	for _, st := range p.Rounds {
		fmt.Fprintf(ew, "round %d\n", st.Index)
		for _, cp := range st.Copies {
			q := ""
			if cp.Quant {
				q = " quantize"
			}
			fmt.Fprintf(ew, "  copy  msg %d %d bytes%s %s -> %s\n", cp.Msg, cp.Bytes, q, regionsString(cp.From), regionsString(cp.To))
		}
		for _, list := range []struct {
			name  string
			wires []Wire
		}{{"recv", st.Recvs}, {"send", st.Sends}} {
			for _, wr := range list.wires {
				dir := "to"
				if list.name == "recv" {
					dir = "from"
				}
				fmt.Fprintf(ew, "  %s %s %d %s %d bytes %s", list.name, dir, wr.Peer, wr.Class, wr.Bytes, wr.Mode)
				switch wr.Mode {
				case WireStaged:
					fmt.Fprintf(ew, " @%d:", wr.StagingOff)
					for _, pt := range wr.Parts {
						q := ""
						if pt.Quant {
							q = " quantize"
						}
						fmt.Fprintf(ew, " msg %d%s %s", pt.Msg, q, regionsString(pt.Regions))
					}
				default:
					fmt.Fprintf(ew, " msg %d %s", wr.Parts[0].Msg, regionsString([]Region{wr.Region}))
				}
				fmt.Fprintln(ew)
			}
		}
	}
	return ew.n, ew.err
}

func regionsString(rs []Region) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("t%d.%s%v", r.Tensor, r.Buf, r.At)
	}
	return strings.Join(parts, "+")
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
	return n, err
}

// Peers returns the sorted distinct peers of the round's wire operations.
func (st *Round) Peers() []int {
	var out []int
	for _, list := range [][]Wire{st.Recvs, st.Sends} {
		for _, w := range list {
			if !slices.Contains(out, w.Peer) {
				out = append(out, w.Peer)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ViewError reports a view that does not fit the part it describes.
type ViewError struct {
	Rank   int
	Tensor string
	Side   string // "source" or "destination"
	View   placement.View
	Why    string
}

func (e *ViewError) Error() string {
	return fmt.Sprintf("rank %d, tensor %q: %s view %v %s", e.Rank, e.Tensor, e.Side, e.View, e.Why)
}
