package refit

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/delta"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// Delta mode (Options.Delta; package delta is the codec, and its doc the
// design). A call in delta mode keeps, per source part, prev: a copy of
// what it last sent, in its buffer's layout (1x the source part's bytes;
// tensors whose parts share one buffer share one prev). Its first step,
// and any step after a failed step of a call that is not Atomic, is a
// full sync: the ordinary dense step, after which prev takes what was
// sent. Every other step is a delta step, moved by deltaMove instead of
// the driver: per planned message, the source encodes its region against
// prev (delta.Encoder) and sends the encoding straight to the message's
// destination, which applies it in place (delta.Apply); each round, the
// pairs first exchange their encodings' lengths (8 bytes per operation),
// so that every receive names the count its sender sends, as every
// transport needs. Those waits, and a round's whose encodings are at most
// an eighth of its dense bytes, are idle ones (transport.WithIdleWaits:
// on MPI they sleep between polls), leaving the CPU to the peers that
// encode and apply meanwhile. A step whose every source region changed at every
// sampled element on every rank (changedThroughout, agreed in the step's
// first collective) moves as a full sync instead: a fully changed step
// costs a full sync and the samples. A message that forwards a region (hier's leaders to
// the other replicas of their domain) sends the encoding that region
// arrived in. With Atomic the destinations check each encoding as it
// arrives (delta.Check) and keep it in place of a shadow, and apply them
// all only once every rank agreed the step completed; the sources'
// prev, in either mode, takes the step's sent regions only once the step
// succeeded. With Verify the checksums are those of the encodings. Delta
// mode runs on the host driver, over host memory, for tensors of 1-, 2-
// or 4-byte elements, moved as they are or converted to FP8 (whose
// sources keep the codes they sent, not a copy: deltaquant.go), on routes
// whose forwarded regions arrive whole (flat, hier).

// deltaPlan is what a call in delta mode needs on this rank, derived once
// from its program: every region its messages read or write, numbered,
// and per round which regions each copy and wire carries.
type deltaPlan struct {
	regions []program.Region // by id
	elems   []int            // element size in bytes, by id; 1 (the codes) for a quantized source
	// quant, by id: the message whose box a source region that converts to
	// FP8 is quantized with (-1: it does not convert); codes its element
	// count, what its encodings cover (deltaquant.go)
	quant []int32
	codes []int64
	// boxes, by id, the box of a converting tensor's region (source or
	// destination), which its scales' blocks are found by
	boxes   []placement.Box
	convert []bool       // by tensor: it converts to FP8 (its sources keep codes, not a copy)
	rounds  []deltaRound // parallel to the program's rounds
	reads   []int        // by id: the sends and copies of a step that read it
	keep    []bool       // by id: a region arriving this step that a later send forwards
	sources []int        // the distinct source regions read: what prev takes
	staging [2][2]int64  // the encoded staging per slot and direction
	// overlap: two distinct source regions share bytes, so that prev
	// cannot take a region's changes as it is encoded (the others would
	// miss them in the shared bytes): prev takes the regions at the end.
	overlap bool
}

type deltaRound struct {
	copies       [][2]int // from, to
	sends, recvs []deltaWire
}

// deltaWire is one wire operation's encodings: its parts' regions, in
// order, and where they sit in the slot's encoded staging (at most max
// bytes, the parts' MaxEncodedLen).
type deltaWire struct {
	ids      []int
	off, max int64
}

// newDeltaPlan checks that program p can run in delta mode and numbers
// its regions.
func newDeltaPlan(p *program.Program, specs []Spec) (*deltaPlan, error) {
	d := &deltaPlan{rounds: make([]deltaRound, len(p.Rounds))}
	d.convert = make([]bool, len(specs))
	for t, s := range specs {
		d.convert[t] = reshard.ConvertsTo(s.Src.DType(), s.Dst.DType())
	}
	ids := map[string]int{}
	ready := map[int]int{} // a destination region's id -> the round from which sends may forward it
	sched := p.Schedule()
	id := func(rs []program.Region, msg int32) (int, error) {
		if len(rs) != 1 {
			return 0, fmt.Errorf("a message of %d regions (delta mode needs one per message)", len(rs))
		}
		r := rs[0]
		k := fmt.Sprint(r.Tensor, r.Buf, r.At)
		if i, ok := ids[k]; ok {
			return i, nil
		}
		s := specs[r.Tensor]
		conv := d.convert[r.Tensor]
		if s.Src.DType() != s.Dst.DType() && !conv {
			return 0, fmt.Errorf("tensor %q converts from %s to %s (delta mode moves tensors as they are, or converts them to FP8)", s.Name, s.Src.DType(), s.Dst.DType())
		}
		elem := int(s.Src.ElemSize())
		if r.Buf == reshard.BufDst {
			elem = int(s.Dst.ElemSize())
		}
		if elem != 1 && elem != 2 && elem != 4 {
			return 0, fmt.Errorf("tensor %q has %d-byte elements (delta mode encodes 1-, 2- and 4-byte elements)", s.Name, elem)
		}
		q, codes := int32(-1), int64(0)
		if conv && r.Buf == reshard.BufSrc {
			q, codes, elem = msg, r.At.Bytes()/int64(elem), 1
		}
		var box placement.Box
		if conv {
			box = sched.Messages[msg].Box
		}
		ids[k] = len(d.regions)
		d.regions, d.elems = append(d.regions, r), append(d.elems, elem)
		d.quant, d.codes = append(d.quant, q), append(d.codes, codes)
		d.boxes = append(d.boxes, box)
		d.reads, d.keep = append(d.reads, 0), append(d.keep, false)
		return len(d.regions) - 1, nil
	}
	read := func(rs []program.Region, msg int32, round int) (int, error) {
		i, err := id(rs, msg)
		if err != nil {
			return 0, err
		}
		if d.reads[i] == 0 && d.regions[i].Buf == reshard.BufSrc {
			d.sources = append(d.sources, i)
		}
		d.reads[i]++
		if d.regions[i].Buf == reshard.BufSrc {
			return i, nil
		}
		if at, ok := ready[i]; !ok || at > round {
			return 0, fmt.Errorf("round %d forwards a region of tensor %q that did not arrive whole before it (delta mode needs routes that forward what they received: flat, hier)",
				round, sched.TensorName(int(d.regions[i].Tensor)))
		}
		d.keep[i] = true
		return i, nil
	}
	for ri := range p.Rounds {
		s, dr := &p.Rounds[ri], &d.rounds[ri]
		for _, cp := range s.Copies {
			from, err := read(cp.From, cp.Msg, s.Index)
			if err != nil {
				return nil, err
			}
			to, err := id(cp.To, cp.Msg)
			if err != nil {
				return nil, err
			}
			ready[to] = s.Index // copies are done before the round's sends
			dr.copies = append(dr.copies, [2]int{from, to})
		}
		var err error
		if dr.sends, err = d.wires(s.Sends, s.Index, read, &d.staging[s.Index%2][0]); err != nil {
			return nil, err
		}
		recvID := func(rs []program.Region, msg int32, _ int) (int, error) { return id(rs, msg) }
		if dr.recvs, err = d.wires(s.Recvs, s.Index, recvID, &d.staging[s.Index%2][1]); err != nil {
			return nil, err
		}
		for _, w := range dr.recvs {
			for _, i := range w.ids {
				ready[i] = reshard.AfterRecv(s.Index)
			}
		}
	}
	d.overlap = d.sourcesOverlap()
	return d, nil
}

// sourcesOverlap reports whether two distinct source regions of one
// tensor share a byte, comparing their runs.
func (d *deltaPlan) sourcesOverlap() bool {
	runs := map[int32][][2]int64{}
	for _, i := range d.sources {
		r := d.regions[i]
		if r.At.Bytes() == 0 {
			continue
		}
		r.At.ForEachRun(func(off int64) { runs[r.Tensor] = append(runs[r.Tensor], [2]int64{off, off + r.At.Run}) })
	}
	for _, rs := range runs {
		slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		for k := 1; k < len(rs); k++ {
			if rs[k][0] < rs[k-1][1] {
				return true
			}
		}
	}
	return false
}

// wires numbers one direction of a round's wires and lays out their
// encoded staging, growing *most to the round's total.
func (d *deltaPlan) wires(ws []program.Wire, round int, id func([]program.Region, int32, int) (int, error), most *int64) ([]deltaWire, error) {
	out := make([]deltaWire, len(ws))
	var off int64
	for j, w := range ws {
		out[j].off = off
		for _, pt := range w.Parts {
			i, err := id(pt.Regions, pt.Msg, round)
			if err != nil {
				return nil, err
			}
			n, err := delta.MaxEncodedLen(d.encAt(i), d.elems[i])
			if err != nil {
				return nil, err
			}
			var ok bool
			if off, ok = checked.Add(off, n); !ok {
				return nil, fmt.Errorf("round %d: encoded staging overflows int64", round)
			}
			out[j].ids = append(out[j].ids, i)
		}
		out[j].max = off - out[j].off
	}
	*most = max(*most, off)
	return out, nil
}

// deltaCall is a delta-mode call's state on this rank, kept between
// steps.
type deltaCall struct {
	plan *deltaPlan
	// prev by tensor, what the source parts last sent; made at the first
	// step, nil where the rank holds no source part.
	prev  []transport.HostBuffer
	made  []transport.Buffer // prev's buffers, to free
	have  bool               // prev holds what every destination holds
	dirty bool               // a failed step may have left destinations mixed: the next is full
	enc   delta.Encoder
	// staging[slot][dir] holds a round's encodings; lens its lengths
	staging [2][2]transport.HostBuffer
	// encs by region id: this step's encodings kept (a source region that
	// several sends read, a region forwarded later, an atomic step's
	// arrivals until the commit); pending lists an atomic step's
	// destination regions to apply at the commit.
	encs    [][]byte
	pending []int
	scratch []byte // a local copy's encoding
	// dense, by region id, in this step: 1 where the region goes dense
	// (raw), 2 where it goes encoded, 0 not yet decided; rawSent lists the
	// source regions sent raw, which prev takes at the end.
	dense   []uint8
	rawSent []int
	// codes, by region id, of a source region that quantizes: what it
	// last sent and this step's (deltaquant.go); scales, by tensor, the
	// scales of a converting tensor's blocks on this rank; rebased a
	// source's codes rescaled, for an atomic step
	codes   [][2]transport.HostBuffer
	scales  []quantScales
	rebased []byte
}

// full reports whether the call's next step must be a full sync.
func (dc *deltaCall) full() bool { return !dc.have || dc.dirty }

// ensure makes prev for the source buffers of the first step and the
// encoded staging (host memory: delta mode needs transport.HostBuffer).
func (dc *deltaCall) ensure(mem transport.Memory, needs [][2]partNeed, bufs []TensorBuffers) error {
	if dc.prev != nil {
		return nil
	}
	for slot := range dc.staging {
		for dir := range dc.staging[slot] {
			b, err := hostAlloc(mem, dc.plan.staging[slot][dir])
			if err != nil {
				return fmt.Errorf("refit: delta staging: %w", err)
			}
			dc.staging[slot][dir] = b
		}
	}
	prev := make([]transport.HostBuffer, len(bufs))
	shared := map[bufferKey]int{}
	for t := range bufs {
		n := needs[t][0]
		if !n.in || bufs[t].Src == nil || dc.plan.convert[t] {
			continue // a converting tensor keeps its codes instead
		}
		if _, ok := bufs[t].Src.(transport.HostBuffer); !ok {
			return fmt.Errorf("refit: delta mode needs host memory, tensor %d's source is %T", t, bufs[t].Src)
		}
		k := keyOf(mem, bufs[t].Src, t)
		if o, ok := shared[k]; ok && len(prev[o]) >= int(n.want) {
			prev[t] = prev[o]
			continue
		}
		b, err := hostAlloc(mem, max(n.want, bufs[t].Src.Len()))
		if err != nil {
			return fmt.Errorf("refit: delta mode's copy of tensor %d's source part: %w", t, err)
		}
		dc.made = append(dc.made, b)
		prev[t], shared[k] = b, t
	}
	dc.prev = prev
	if err := dc.ensureCodes(mem); err != nil {
		return err
	}
	dc.encs = make([][]byte, len(dc.plan.regions))
	dc.dense = make([]uint8, len(dc.plan.regions))
	return nil
}

func hostAlloc(mem transport.Memory, n int64) (transport.HostBuffer, error) {
	b, err := mem.Alloc(n)
	if err != nil {
		return nil, err
	}
	hb, ok := b.(transport.HostBuffer)
	if !ok {
		mem.Free(b)
		return nil, fmt.Errorf("memory %T does not hand out host buffers (delta mode runs on the host)", mem)
	}
	return hb, nil
}

// updatesPrev reports whether a delta step's encodings update prev as
// they go (delta.Encoder.UpdatePrev): without Atomic, where no two
// source regions overlap.
func (dc *deltaCall) updatesPrev(atomic bool) bool { return !atomic && !dc.plan.overlap }

// settle records a step's outcome: on success prev takes the regions the
// step sent (unless its encodings did already); a failure that may have
// changed destinations makes the next step full.
func (dc *deltaCall) settle(st *step, err error, atomic bool) {
	if err != nil {
		if !atomic || st.committing {
			dc.dirty = true
		}
		return
	}
	sources := dc.plan.sources
	if st.delta && dc.updatesPrev(atomic) {
		sources = dc.rawSent // the encodings updated prev for the rest
	}
	for _, i := range dc.plan.sources {
		if dc.plan.quant[i] >= 0 {
			if dc.settleCodes(i, st.delta && dc.updatesPrev(atomic)) != nil {
				dc.have = false // cannot happen: the codes are the regions' size
				return
			}
		}
	}
	for _, i := range sources {
		r := dc.plan.regions[i]
		if dc.plan.quant[i] >= 0 {
			continue
		}
		cur, _ := st.bufs[r.Tensor].Src.(transport.HostBuffer)
		if cur == nil || dc.prev[r.Tensor] == nil {
			dc.have = false
			return
		}
		if err := delta.Commit(dc.prev[r.Tensor], cur, r.At, dc.plan.elems[i]); err != nil {
			dc.have = false // cannot happen: the buffer check saw these regions fit
			return
		}
	}
	dc.have, dc.dirty = true, false
	dc.scalesSettled()
}

// commit applies an atomic delta step's kept encodings to the caller's
// destination buffers: each passed delta.Check on arrival.
func (dc *deltaCall) commit(bufs []TensorBuffers) error {
	for _, i := range dc.pending {
		r := dc.plan.regions[i]
		dst, _ := bufs[r.Tensor].Dst.(transport.HostBuffer)
		if err := dc.rescaleDst(dst, i); err != nil {
			return fmt.Errorf("refit: committing tensor %d: %w", r.Tensor, err)
		}
		if err := delta.Apply(dst, r.At, dc.plan.elems[i], dc.encs[i]); err != nil {
			return fmt.Errorf("refit: committing tensor %d: %w", r.Tensor, err)
		}
	}
	dc.pending = dc.pending[:0]
	return nil
}

// close frees prev and the staging.
func (dc *deltaCall) close(mem transport.Memory) {
	freeAll(mem, dc.made)
	for slot := range dc.staging {
		for dir := range dc.staging[slot] {
			if b := dc.staging[slot][dir]; b != nil {
				mem.Free(b)
			}
		}
	}
	dc.made, dc.prev, dc.staging = nil, nil, [2][2]transport.HostBuffer{}
}
