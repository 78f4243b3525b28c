package delta

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/m2n-dev/m2n/strided"
)

// Encoder encodes messages. Its zero value is ready to use; it keeps
// scratch space between calls (no allocation per block or element once
// warm) and is not safe for concurrent use: one Encoder per goroutine.
type Encoder struct {
	// UpdatePrev makes Encode copy every changed element of cur into prev as
	// it goes, so that prev equals cur over the region afterwards: the
	// non-atomic mode, where a failed step forces a full sync anyway.
	// Without it Encode only reads prev, and the caller commits the step
	// with Commit or by applying the message to prev.
	UpdatePrev bool

	stats Stats
	ps    []piece
	nz    []uint64 // scan entries
	idx   [BlockElems]byte
	masks [BlockElems * 4 / 64]uint64        // scanWide's, one per 64 bytes of a block
	diffs [diffBatch][BlockElems / 32]uint32 // blockDiffAVX2's: one bit per element, per block
}

// diffBatch is how many whole blocks of one run the encoder compares in
// one vector pass before it encodes them: the pass streams both versions
// at memory speed, and the encoding then reads them from the cache.
const diffBatch = 32

// folds, by element size, turn a mask of changed bytes into one of
// changed elements: m |= m>>s1; m = (m|m>>s2) & keep.
var folds = [5]struct {
	s1, s2 uint
	keep   uint64
}{1: {0, 0, ^uint64(0)}, 2: {1, 0, 0x5555555555555555}, 4: {1, 2, 0x1111111111111111}}

// scanWide appends to idx the indices, from base, of the elements that
// differ between a and b in their first wide bytes (a multiple of 64, at
// most a block), and adds them to c, comparing 64 bytes at a time with
// AVX2; it stops once c exceeds limit. The indices are those scan and
// indices find.
func (e *Encoder) scanWide(idx []byte, a, b []byte, elem, c, limit, base int) ([]byte, int, int) {
	k := min(len(a)/64, len(e.masks))
	ms := e.masks[:k]
	diffMasksAVX2(&a[0], &b[0], k, &ms[0])
	// one bit per element, its lowest byte's: fold the element's other
	// bytes into it (no branch on elem)
	f := folds[elem]
	lg := logLane[elem] - 3
	per := 64 >> lg
	for j, m := range ms {
		m |= m >> f.s1
		m = (m | m>>f.s2) & f.keep
		if c += bits.OnesCount64(m); c > limit {
			return idx, c, 64 * k
		}
		at := base + j*per
		for ; m != 0; m &= m - 1 {
			idx = append(idx, byte(at+bits.TrailingZeros64(m)>>lg))
		}
	}
	return idx, c, 64 * k
}

// Stats describes the last message an Encoder encoded.
type Stats struct {
	Elems    int64 // elements in the message
	Blocks   int64 // blocks in the message
	Skipped  int64 // blocks sent as unchanged
	Lists    int64 // blocks sent as an index list and values
	Bitmaps  int64 // blocks sent as a bitmap and values
	Dense    int64 // blocks sent whole
	Values   int64 // element values the encoding carries
	Bytes    int64 // the encoding's length
	Fallback bool  // block by block would have exceeded MaxEncodedLen: sent dense instead
}

// Stats returns what the last successful Encode produced.
func (e *Encoder) Stats() Stats { return e.stats }

// Encode writes to out the encoding of region r of cur against prev (the
// bytes the destination holds: what this source last sent), elements of
// elem bytes compared bit for bit, and returns its length. prev and cur
// share r's layout. A nil prev encodes every block dense: the first step's
// full sync, or any step after a destination joined. out must hold
// MaxEncodedLen(r, elem) bytes; the encoding never exceeds it (where block
// by block would, the message goes dense). prev is written only with
// UpdatePrev. Errors wrap ErrInvalid.
func (e *Encoder) Encode(prev, cur []byte, r strided.Desc, elem int, out []byte) (int, error) {
	m, err := newMessage(r, elem, len(cur))
	if err != nil {
		return 0, err
	}
	if prev != nil {
		if err := r.Fits(int64(len(prev))); err != nil {
			return 0, fmt.Errorf("%w: prev: %w", ErrInvalid, err)
		}
	}
	if int64(len(out)) < m.maxLen {
		return 0, fmt.Errorf("%w: output of %d bytes for %v, MaxEncodedLen is %d", ErrInvalid, len(out), r, m.maxLen)
	}
	e.stats = Stats{Elems: m.elems, Blocks: m.blocks}
	s := state{e: e, m: &m, out: out[:m.maxLen], n: HeaderLen, open: -1}
	if prev == nil || !s.delta(prev, cur) {
		if prev != nil {
			e.stats = Stats{Elems: m.elems, Blocks: m.blocks, Fallback: true}
			if e.UpdatePrev {
				commit(prev, cur, r)
			}
		}
		s.dense(cur)
	}
	putHeader(out, &m, s.n)
	e.stats.Bytes = int64(s.n)
	return s.n, nil
}

// Commit copies region r of cur into prev, so that prev holds what the
// destinations hold after a step that sent r: for the first step's full
// sync and, without UpdatePrev, once a step commits (atomic mode). Apply
// of the step's message to prev does the same touching only the changed
// blocks. Errors wrap ErrInvalid.
func Commit(prev, cur []byte, r strided.Desc, elem int) error {
	if _, err := newMessage(r, elem, len(cur)); err != nil {
		return err
	}
	if err := r.Fits(int64(len(prev))); err != nil {
		return fmt.Errorf("%w: prev: %w", ErrInvalid, err)
	}
	commit(prev, cur, r)
	return nil
}

func commit(prev, cur []byte, r strided.Desc) {
	if r.Bytes() == 0 {
		return
	}
	r.ForEachRun(func(off int64) { copy(prev[off:off+r.Run], cur[off:off+r.Run]) })
}

// state is one Encode call's output.
type state struct {
	e    *Encoder
	m    *message
	out  []byte // MaxEncodedLen bytes
	n    int    // bytes written
	open int    // offset of the last op when it is a skip or dense op that may grow, else -1
}

// delta encodes block by block; false when the encoding would exceed out.
func (s *state) delta(prev, cur []byte) bool {
	m := s.m
	bb := int64(BlockElems * m.elem)
	var w walker
	w.init(m.r)
	// After an unchanged block, compare whole blocks first, and spans
	// of skipSpan blocks where a run holds them: skipping is then at the
	// speed of a vector compare. After a changed block go straight to the
	// scan, which finds an unchanged block too.
	skipping := true
	for p := int64(0); p < m.total; {
		off := w.runOff + w.within
		if k := min(w.run-w.within, m.total-p) / bb; useAVX2 && k > 0 &&
			(s.open < 0 || s.out[s.open] != tagDense || !sampledDense(prev, cur, off, m.elem)) {
			// whole blocks in one run: compared in one pass, then
			// encoded from their bits (but a block that follows a dense
			// one and changed at every sample goes dense below, unread)
			k = min(k, diffBatch)
			end := off + k*bb
			a, b := prev[off:end], cur[off:end]
			blockDiffAVX2(&a[0], &b[0], m.elem, int(k), &s.e.diffs[0])
			for j := range k {
				var ok bool
				if skipping, ok = s.whole(prev, cur, off+j*bb, &s.e.diffs[j]); !ok {
					return false
				}
			}
			w.take(k * bb)
			p += k * bb
			continue
		}
		if sp := skipSpan * bb; skipping && m.total-p >= sp && w.run-w.within >= sp {
			if off := w.runOff + w.within; string(prev[off:off+sp]) == string(cur[off:off+sp]) {
				w.take(sp)
				for range skipSpan {
					if !s.extend(tagSkip) {
						return false
					}
				}
				s.e.stats.Skipped += skipSpan
				p += sp
				continue
			}
		}
		nb := min(bb, m.total-p)
		ps := w.block(s.e.ps[:0], nb)
		s.e.ps = ps
		p += nb
		if skipping && equal(prev, cur, ps) {
			if !s.extend(tagSkip) {
				return false
			}
			s.e.stats.Skipped++
			continue
		}
		var ok bool
		if skipping, ok = s.changed(prev, cur, ps, int(nb)/m.elem); !ok {
			return false
		}
	}
	return true
}

// skipSpan is how many blocks the encoder compares at once after an
// unchanged block.
const skipSpan = 16

// extend counts one more block into the open op when it has tag t and
// room, or opens a new op of tag t; false when out is full.
func (s *state) extend(t byte) bool {
	if s.open >= 0 && s.out[s.open] == t {
		c := binary.LittleEndian.Uint32(s.out[s.open+1:])
		if int64(c) < maxOpBlocks {
			binary.LittleEndian.PutUint32(s.out[s.open+1:], c+1)
			return true
		}
	}
	if s.n+opLen > len(s.out) {
		return false
	}
	s.out[s.n] = t
	binary.LittleEndian.PutUint32(s.out[s.n+1:], 1)
	s.open = s.n
	s.n += opLen
	return true
}

// changed encodes a block of n elements: as a list
// or a bitmap of the changed elements, whichever is smaller, or dense
// where that is smaller still, or as unchanged (unchanged true) where it
// is; ok false when out is full. The comparison stops once the block is
// sure to go dense.
func (s *state) changed(prev, cur []byte, ps []piece, n int) (unchanged, ok bool) {
	elem := s.m.elem
	dense := n * elem
	if s.open < 0 || s.out[s.open] != tagDense {
		dense += opLen
	} else if len(ps) == 1 && n == BlockElems && sampledDense(prev, cur, ps[0].off, elem) {
		return false, s.denseBlock(prev, cur, ps)
	}
	bmLen := 1 + (n+7)/8
	// c changes fit a list while 2+c*(1+elem) < dense, a bitmap while
	// bmLen+c*elem < dense.
	limit := max((dense-3)/(1+elem), (dense-bmLen-1)/elem, 0)
	idx, c, base := s.e.idx[:0], 0, 0
	for _, q := range ps {
		a, b := prev[q.off:q.off+q.n], cur[q.off:q.off+q.n]
		if useAVX2 && len(a) >= 64 {
			var wide int
			if idx, c, wide = s.e.scanWide(idx, a, b, elem, c, limit, base); c > limit {
				return false, s.denseBlock(prev, cur, ps)
			}
			a, b = a[wide:], b[wide:]
			base += wide / elem
		}
		s.e.nz = scan(s.e.nz[:0], a, b, elem, &c, limit)
		if c > limit {
			return false, s.denseBlock(prev, cur, ps)
		}
		idx = indices(idx, s.e.nz, elem, base)
		base += len(a) / elem
	}
	if c == 0 {
		s.e.stats.Skipped++
		return true, s.extend(tagSkip)
	}
	list, bm := 2+c*(1+elem), bmLen+c*elem
	if list <= bm {
		if s.n+list > len(s.out) {
			return false, false
		}
		s.out[s.n] = tagList
		s.out[s.n+1] = byte(c - 1)
		copy(s.out[s.n+2:], idx)
		s.n += 2 + c
		s.e.stats.Lists++
	} else {
		if s.n+bm > len(s.out) {
			return false, false
		}
		s.out[s.n] = tagBitmap
		b := s.out[s.n+1 : s.n+bmLen]
		clear(b)
		for _, i := range idx {
			b[i>>3] |= 1 << (i & 7)
		}
		s.n += bmLen
		s.e.stats.Bitmaps++
	}
	s.values(prev, cur, ps, idx)
	s.e.stats.Values += int64(c)
	s.open = -1
	return false, true
}

// whole is changed for a block of BlockElems elements at off, in one
// piece, whose changed elements' bits d (blockDiffAVX2's) are known: the
// index list, or the bitmap (the bits themselves), and the values (and,
// with UpdatePrev, prev) are written from them in one pass over the set
// bits. The encoding is changed's, byte for byte
// (TestScanAVX2MatchesWords).
func (s *state) whole(prev, cur []byte, off int64, d *[BlockElems / 32]uint32) (unchanged, ok bool) {
	elem := s.m.elem
	end := off + int64(BlockElems*elem)
	ps := append(s.e.ps[:0], piece{off, end - off})
	s.e.ps = ps
	dense := BlockElems * elem
	if s.open < 0 || s.out[s.open] != tagDense {
		dense += opLen
	} else if sampledDense(prev, cur, off, elem) {
		return false, s.denseBlock(prev, cur, ps)
	}
	a, b := prev[off:end], cur[off:end]
	w := [4]uint64{uint64(d[0]) | uint64(d[1])<<32, uint64(d[2]) | uint64(d[3])<<32,
		uint64(d[4]) | uint64(d[5])<<32, uint64(d[6]) | uint64(d[7])<<32}
	c := bits.OnesCount64(w[0]) + bits.OnesCount64(w[1]) + bits.OnesCount64(w[2]) + bits.OnesCount64(w[3])
	if c == 0 {
		s.e.stats.Skipped++
		return true, s.extend(tagSkip)
	}
	const bmLen = 1 + BlockElems/8
	if c > max((dense-3)/(1+elem), (dense-bmLen-1)/elem, 0) {
		return false, s.denseBlock(prev, cur, ps)
	}
	list, bm := 2+c*(1+elem), bmLen+c*elem
	var ix, vals []byte // where the indices (a list's) and the values go
	if list <= bm {
		if s.n+list > len(s.out) {
			return false, false
		}
		o := s.out[s.n : s.n+list]
		o[0], o[1] = tagList, byte(c-1)
		ix, vals = o[2:2+c], o[2+c:]
		s.n += list
		s.e.stats.Lists++
	} else {
		if s.n+bm > len(s.out) {
			return false, false
		}
		o := s.out[s.n : s.n+bm]
		o[0] = tagBitmap
		for j, x := range w {
			binary.LittleEndian.PutUint64(o[1+8*j:], x)
		}
		vals = o[bmLen:]
		s.n += bm
		s.e.stats.Bitmaps++
	}
	// one pass over the set bits writes the indices and the values
	up, k := s.e.UpdatePrev, 0
	for j, x := range w {
		for ; x != 0; x &= x - 1 {
			e := j<<6 | bits.TrailingZeros64(x)
			if ix != nil {
				ix[k] = byte(e)
			}
			if i := e * elem; elem == 2 {
				vals[2*k], vals[2*k+1] = b[i], b[i+1]
				if up {
					a[i], a[i+1] = b[i], b[i+1]
				}
			} else {
				copy(vals[k*elem:(k+1)*elem], b[i:i+elem])
				if up {
					copy(a[i:i+elem], b[i:i+elem])
				}
			}
			k++
		}
	}
	s.e.stats.Values += int64(c)
	s.open = -1
	return false, true
}

// sampledDense reports whether every element of 8 words spread over the
// block at off (32 elements apart) changed. After a dense block such a
// block goes dense without counting the rest: a fully changed message
// then costs a copy and 8 words per block, not a scan of both versions.
// The price is a block that the samples mislead (every sampled element
// changed, few others) going dense where a list or bitmap was smaller;
// it never exceeds dense, so a message still never exceeds
// MaxEncodedLen.
func sampledDense(prev, cur []byte, off int64, elem int) bool {
	full := 8 / elem
	for k := range int64(8) {
		o := off + k*int64(32*elem)
		if bits.OnesCount64(changedLanes(binary.LittleEndian.Uint64(prev[o:])^binary.LittleEndian.Uint64(cur[o:]), elem)) != full {
			return false
		}
	}
	return true
}

// values appends the values of the block's elements idx from cur and,
// with UpdatePrev, copies them into prev: only the changed elements,
// not the block.
func (s *state) values(prev, cur []byte, ps []piece, idx []byte) {
	elem := s.m.elem
	e64 := int64(elem)
	n := int64(s.n)
	up := s.e.UpdatePrev
	if len(ps) == 1 {
		o := ps[0].off
		for _, i := range idx {
			at := o + int64(i)*e64
			put(s.out, n, cur, at, elem)
			if up {
				put(prev, at, cur, at, elem)
			}
			n += e64
		}
	} else {
		l := locator{ps: ps}
		for _, i := range idx {
			at := l.at(int64(i) * e64)
			put(s.out, n, cur, at, elem)
			if up {
				put(prev, at, cur, at, elem)
			}
			n += e64
		}
	}
	s.n = int(n)
}

// denseBlock appends a whole block and, with UpdatePrev, copies it into
// prev.
func (s *state) denseBlock(prev, cur []byte, ps []piece) bool {
	if !s.extend(tagDense) {
		return false
	}
	var nb int64
	for _, q := range ps {
		nb += q.n
	}
	if int64(s.n)+nb > int64(len(s.out)) {
		return false
	}
	for _, q := range ps {
		s.n += copy(s.out[s.n:], cur[q.off:q.off+q.n])
		if s.e.UpdatePrev {
			copy(prev[q.off:q.off+q.n], cur[q.off:q.off+q.n])
		}
	}
	s.e.stats.Dense++
	s.e.stats.Values += nb / int64(s.m.elem)
	return true
}

// dense writes the whole message as dense ops from the header on, which
// MaxEncodedLen always holds.
func (s *state) dense(cur []byte) {
	m := s.m
	s.n, s.open = HeaderLen, -1
	var w walker
	w.init(m.r)
	bb := int64(BlockElems * m.elem)
	for b := int64(0); b < m.blocks; {
		k := min(maxOpBlocks, m.blocks-b)
		s.out[s.n] = tagDense
		binary.LittleEndian.PutUint32(s.out[s.n+1:], uint32(k))
		s.n += opLen
		for left := min(k*bb, m.total-b*bb); left > 0; {
			q := w.take(left)
			s.n += copy(s.out[s.n:], cur[q.off:q.off+q.n])
			left -= q.n
		}
		b += k
	}
	s.e.stats.Dense = m.blocks
	s.e.stats.Values = m.elems
}
