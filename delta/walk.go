package delta

import (
	"encoding/binary"
	"math/bits"

	"github.com/m2n-dev/m2n/strided"
)

// piece is a contiguous part of a block inside a buffer.
type piece struct{ off, n int64 }

// walker steps through a descriptor's bytes in run order: take hands out
// contiguous pieces, seek jumps to any logical byte. It allocates nothing.
type walker struct {
	off0, run     int64
	count, stride []int64
	idx           [16]int64
	runOff        int64 // buffer offset of the current run
	within        int64 // bytes of the current run already taken
	pos           int64 // logical byte the walker is at
}

func (w *walker) init(r strided.Desc) {
	*w = walker{off0: r.Offset, run: r.Run, count: r.Count, stride: r.Stride, runOff: r.Offset}
}

// seek positions the walker at logical byte p of the region (p below its
// size).
func (w *walker) seek(p int64) {
	if d := p - w.pos; d >= 0 && d < w.run-w.within {
		w.within += d // in the current run: no division
		w.pos = p
		return
	}
	w.pos = p
	q := p / w.run
	w.within = p % w.run
	off := w.off0
	for d := len(w.count) - 1; d >= 0; d-- {
		w.idx[d] = q % w.count[d]
		q /= w.count[d]
		off += w.idx[d] * w.stride[d]
	}
	w.runOff = off
}

// take returns the next contiguous piece of at most limit bytes and steps
// past it.
func (w *walker) take(limit int64) piece {
	p := piece{w.runOff + w.within, min(w.run-w.within, limit)}
	w.within += p.n
	w.pos += p.n
	if w.within == w.run {
		w.nextRun()
	}
	return p
}

// block appends the pieces of the next n bytes to ps.
func (w *walker) block(ps []piece, n int64) []piece {
	for n > 0 {
		p := w.take(n)
		ps = append(ps, p)
		n -= p.n
	}
	return ps
}

func (w *walker) nextRun() {
	w.within = 0
	for d := len(w.count) - 1; d >= 0; d-- {
		w.idx[d]++
		w.runOff += w.stride[d]
		if w.idx[d] < w.count[d] {
			return
		}
		w.runOff -= w.stride[d] * w.count[d]
		w.idx[d] = 0
	}
}

// equal reports whether a and b hold the same bytes at every piece.
func equal(a, b []byte, ps []piece) bool {
	for _, p := range ps {
		if string(a[p.off:p.off+p.n]) != string(b[p.off:p.off+p.n]) {
			return false
		}
	}
	return true
}

// changedLanes returns a word with one bit set per element (of elem
// bytes, little-endian in x) whose bits differ, x being a XOR b: the top
// bit of the element's first byte.
func changedLanes(x uint64, elem int) uint64 {
	const lo7, hi1 = 0x7F7F7F7F7F7F7F7F, 0x8080808080808080
	switch elem {
	case 1:
		return (((x & lo7) + lo7) | x) & hi1
	case 2:
		t := (x | x>>8) & 0x00FF00FF00FF00FF
		return ((t + 0x007F007F007F007F) | t) & 0x0080008000800080
	default:
		t := x | x>>8
		t = (t | t>>16) & 0x000000FF000000FF
		return ((t + 0x0000007F0000007F) | t) & 0x0000008000000080
	}
}

// scan appends to nz an entry for each 8 bytes of a and b (a piece of at
// most 128 words; the last word padded) that differ: changedLanes of
// their XOR, whose bits are the top bits of bytes, with the word's index
// in bits 0-6. It adds the changed elements to *c and stops once *c
// exceeds limit.
func scan(nz []uint64, a, b []byte, elem int, c *int, limit int) []uint64 {
	nz, *c = scanN(nz, a, b, elem, *c, limit)
	return nz
}

func scanN(nz []uint64, a, b []byte, elem int, n int, limit int) ([]uint64, int) {
	b = b[:len(a)]
	le := binary.LittleEndian
	i := 0
	for ; i+64 <= len(a); i += 64 {
		// 64 bytes at a time: most are unchanged in a sparse block.
		a, b := a[i:i+64], b[i:i+64]
		x := [8]uint64{le.Uint64(a) ^ le.Uint64(b), le.Uint64(a[8:]) ^ le.Uint64(b[8:]),
			le.Uint64(a[16:]) ^ le.Uint64(b[16:]), le.Uint64(a[24:]) ^ le.Uint64(b[24:]),
			le.Uint64(a[32:]) ^ le.Uint64(b[32:]), le.Uint64(a[40:]) ^ le.Uint64(b[40:]),
			le.Uint64(a[48:]) ^ le.Uint64(b[48:]), le.Uint64(a[56:]) ^ le.Uint64(b[56:])}
		if x[0]|x[1]|x[2]|x[3]|x[4]|x[5]|x[6]|x[7] == 0 {
			continue
		}
		for j, x := range x {
			if k := i + 8*j; x != 0 {
				m := changedLanes(x, elem)
				nz = append(nz, m|uint64(k>>3))
				n += bits.OnesCount64(m)
			}
		}
		if n > limit {
			return nz, n
		}
	}
	for ; i+8 <= len(a); i += 8 {
		if x := le.Uint64(a[i:]) ^ le.Uint64(b[i:]); x != 0 {
			m := changedLanes(x, elem)
			nz = append(nz, m|uint64(i>>3))
			n += bits.OnesCount64(m)
		}
	}
	if i < len(a) {
		if m := changedLanes(word(a[i:])^word(b[i:]), elem); m != 0 {
			nz = append(nz, m|uint64(i>>3))
			n += bits.OnesCount64(m)
		}
	}
	return nz, n
}

// indices appends to idx the element indices, from base, that a piece's
// scan entries nz mark. Indices fit a byte: a block has BlockElems
// elements.
func indices(idx []byte, nz []uint64, elem int, base int) []byte {
	lg, le := logLane[elem], logLane[elem]-3
	for _, m := range nz {
		e := base + int(m&0x7F)<<3>>le
		for m &^= 0x7F; m != 0; m &= m - 1 {
			idx = append(idx, byte(e+bits.TrailingZeros64(m)>>lg))
		}
	}
	return idx
}

// logLane is log2 of an element's bits, by element size.
var logLane = [5]uint{1: 3, 2: 4, 4: 5}

// word returns up to 8 bytes of b as a little-endian word.
func word(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var x uint64
	for i, v := range b {
		x |= uint64(v) << (8 * i)
	}
	return x
}

// put copies one element of elem bytes from src[s:] to dst[d:].
func put(dst []byte, d int64, src []byte, s int64, elem int) {
	switch elem {
	case 1:
		dst[d] = src[s]
	case 2:
		binary.LittleEndian.PutUint16(dst[d:], binary.LittleEndian.Uint16(src[s:]))
	default:
		binary.LittleEndian.PutUint32(dst[d:], binary.LittleEndian.Uint32(src[s:]))
	}
}

// locator maps a block's element indices, visited in increasing order, to
// buffer offsets through the block's pieces.
type locator struct {
	ps   []piece
	k    int   // current piece
	base int64 // block byte where piece k starts
}

// at returns the buffer offset of the element at block byte b (b not below
// the previous call's).
func (l *locator) at(b int64) int64 {
	for b >= l.base+l.ps[l.k].n {
		l.base += l.ps[l.k].n
		l.k++
	}
	return l.ps[l.k].off + b - l.base
}
