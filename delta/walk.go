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
}

func (w *walker) init(r strided.Desc) {
	*w = walker{off0: r.Offset, run: r.Run, count: r.Count, stride: r.Stride, runOff: r.Offset}
}

// seek positions the walker at logical byte p of the region (p below its
// size).
func (w *walker) seek(p int64) {
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

// laneMask is the mask of one element in a 64-bit word, by element size.
var laneMask = [5]uint64{1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF}

// logLane is log2 of an element's bits, by element size.
var logLane = [5]uint{1: 3, 2: 4, 4: 5}

// diff appends to idx the indices, from base, of the elements of a and b
// (of elem bytes each) whose bits differ, eight bytes at a time, and stops
// once idx holds more than limit. Indices fit a byte: a block has
// BlockElems elements.
func diff(idx []byte, a, b []byte, elem int, base int, limit int) []byte {
	lane, lg := laneMask[elem], logLane[elem]
	b = b[:len(a)]
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
		if x == 0 {
			continue
		}
		if len(idx) > limit {
			return idx
		}
		e := base + i/elem
		for x != 0 {
			l := uint(bits.TrailingZeros64(x)) >> lg
			idx = append(idx, byte(e+int(l)))
			x &^= lane << (l << lg)
		}
	}
	for ; i < len(a); i += elem {
		if string(a[i:i+elem]) != string(b[i:i+elem]) {
			idx = append(idx, byte(base+i/elem))
		}
	}
	return idx
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
