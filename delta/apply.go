package delta

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/m2n-dev/m2n/strided"
)

// Apply writes the changes that enc carries into region r of dst, in
// place: elements of unchanged blocks keep their bytes. r is the
// destination's descriptor of the message's box (it may cut runs
// differently from the source's); its runs must be disjoint, as a plan's
// destination descriptors are (strided.Desc.CheckDisjoint). enc may be
// longer than its encoding (a receive posted at MaxEncodedLen).
//
// Apply checks the whole encoding before it writes a byte: a truncated or
// malformed encoding, or one made for another element size or element
// count, is a *CorruptError naming the block, and dst is left as it was.
// Argument errors wrap ErrInvalid. Apply allocates nothing.
func Apply(dst []byte, r strided.Desc, elem int, enc []byte) error {
	m, err := newMessage(r, elem, len(dst))
	if err != nil {
		return err
	}
	if err := decode(nil, enc, &m); err != nil {
		return err
	}
	if len(m.r.Count) == 0 {
		writeFlat(dst, enc, &m)
		return nil
	}
	return decode(dst, enc, &m)
}

// writeFlat writes a checked encoding (decode found it whole) into a
// region of one run, in one pass that trusts the ops: each block is at
// its offset, and a list's or bitmap's values go straight to their
// elements.
func writeFlat(dst, enc []byte, m *message) {
	n, _ := readHeader(enc, m)
	enc = enc[:n]
	elem, bb := m.elem, int64(BlockElems*m.elem)
	base := m.r.Offset
	at := HeaderLen
	for b := int64(0); at < len(enc); {
		o := base + b*bb // the block's offset in dst
		switch enc[at] {
		case tagSkip:
			b += int64(binary.LittleEndian.Uint32(enc[at+1:]))
			at += opLen
		case tagDense:
			k := int64(binary.LittleEndian.Uint32(enc[at+1:]))
			nb := min(k*bb, m.total-b*bb)
			at += opLen
			at += copy(dst[o:o+nb], enc[at:at+int(nb)])
			b += k
		case tagList:
			c := int(enc[at+1]) + 1
			idx := enc[at+2 : at+2+c]
			vals := enc[at+2+c : at+2+c+c*elem]
			if elem == 2 {
				for k, i := range idx {
					d := o + 2*int64(i)
					dst[d], dst[d+1] = vals[2*k], vals[2*k+1]
				}
			} else {
				for k, i := range idx {
					d := o + int64(i)*int64(elem)
					copy(dst[d:d+int64(elem)], vals[k*elem:(k+1)*elem])
				}
			}
			at += 2 + c + c*elem
			b++
		default: // tagBitmap
			ne := int(min(bb, m.total-b*bb)) / elem
			bl := (ne + 7) / 8
			bm := enc[at+1 : at+1+bl]
			v := at + 1 + bl
			for j := 0; j < bl; j += 8 {
				for x := word(bm[j:]); x != 0; x &= x - 1 {
					d := o + int64(j*8+bits.TrailingZeros64(x))*int64(elem)
					copy(dst[d:d+int64(elem)], enc[v:v+elem])
					v += elem
				}
			}
			at = v
			b++
		}
	}
}

// Check checks enc as Apply does, without writing anything: for a
// receiver that holds messages until a step commits (atomic mode), so that
// the commit's Apply cannot fail.
func Check(enc []byte, r strided.Desc, elem int) error {
	m, err := newMessage(r, elem, -1)
	if err != nil {
		return err
	}
	return decode(nil, enc, &m)
}

// decoder is one pass over an encoding: checking only (dst nil), or
// checking and writing.
type decoder struct {
	dst, enc []byte
	m        *message
	w        walker
	at       int   // next byte of enc
	b        int64 // next block
	flat     bool  // the region is one run: a block is one piece at its offset
	ps       [BlockElems]piece
}

func (d *decoder) corrupt(format string, a ...any) error {
	return &CorruptError{At: int64(d.at), Block: d.b, Blocks: d.m.blocks, Reason: fmt.Sprintf(format, a...)}
}

func decode(dst, enc []byte, m *message) error {
	n, err := readHeader(enc, m)
	if err != nil {
		return err
	}
	d := decoder{dst: dst, enc: enc[:n], m: m, at: HeaderLen, flat: len(m.r.Count) == 0}
	if m.total > 0 {
		d.w.init(m.r)
	}
	for d.at < len(d.enc) {
		if d.b >= m.blocks {
			return d.corrupt("%d bytes past the last block", len(d.enc)-d.at)
		}
		switch t := d.enc[d.at]; t {
		case tagSkip, tagDense:
			err = d.run(t)
		case tagList:
			err = d.list()
		case tagBitmap:
			err = d.bitmap()
		default:
			err = d.corrupt("unknown op %d", t)
		}
		if err != nil {
			return err
		}
	}
	if d.b != m.blocks {
		return d.corrupt("the encoding ends with %d of %d blocks", d.b, m.blocks)
	}
	return nil
}

// block returns the byte where the current block starts in the message,
// its length in bytes and in elements.
func (d *decoder) block() (p, nb int64, ne int) {
	bb := int64(BlockElems * d.m.elem)
	p = d.b * bb
	if nb = d.m.total - p; nb >= bb {
		return p, bb, BlockElems
	}
	return p, nb, int(nb) / d.m.elem
}

// run decodes a skip or dense op.
func (d *decoder) run(t byte) error {
	if len(d.enc)-d.at < opLen {
		return d.corrupt("truncated op header")
	}
	k := int64(binary.LittleEndian.Uint32(d.enc[d.at+1:]))
	if k == 0 || k > d.m.blocks-d.b {
		return d.corrupt("op of %d blocks, %d left", k, d.m.blocks-d.b)
	}
	d.at += opLen
	if t == tagSkip {
		d.b += k
		return nil
	}
	p, _, _ := d.block()
	nb := min(k*int64(BlockElems*d.m.elem), d.m.total-p)
	if int64(len(d.enc)-d.at) < nb {
		return d.corrupt("dense op of %d bytes, %d left", nb, len(d.enc)-d.at)
	}
	if d.dst != nil {
		d.w.seek(p)
		for at, left := int64(d.at), nb; left > 0; {
			q := d.w.take(left)
			at += int64(copy(d.dst[q.off:q.off+q.n], d.enc[at:]))
			left -= q.n
		}
	}
	d.at += int(nb)
	d.b += k
	return nil
}

// list decodes an index-list op.
func (d *decoder) list() error {
	_, _, ne := d.block()
	if len(d.enc)-d.at < 2 {
		return d.corrupt("truncated list op")
	}
	c := int(d.enc[d.at+1]) + 1
	if c > ne {
		return d.corrupt("list of %d elements in a block of %d", c, ne)
	}
	if len(d.enc)-d.at < 2+c*(1+d.m.elem) {
		return d.corrupt("list of %d elements needs %d bytes, %d left", c, 2+c*(1+d.m.elem), len(d.enc)-d.at)
	}
	idx := d.enc[d.at+2 : d.at+2+c]
	prev := -1
	for _, i := range idx {
		if int(i) <= prev || int(i) >= ne {
			return d.corrupt("list index %d after %d in a block of %d", i, prev, ne)
		}
		prev = int(i)
	}
	d.at += 2 + c
	if d.dst != nil {
		d.values(idx)
	}
	d.at += c * d.m.elem
	d.b++
	return nil
}

// bitmap decodes a bitmap op.
func (d *decoder) bitmap() error {
	_, _, ne := d.block()
	bl := (ne + 7) / 8
	if len(d.enc)-d.at < 1+bl {
		return d.corrupt("truncated bitmap")
	}
	bm := d.enc[d.at+1 : d.at+1+bl]
	if r := ne % 8; r != 0 && bm[bl-1]>>r != 0 {
		return d.corrupt("bitmap marks elements past the block's %d", ne)
	}
	c := 0
	for j := 0; j < bl; j += 8 {
		c += bits.OnesCount64(word(bm[j:]))
	}
	if c == 0 {
		return d.corrupt("empty bitmap")
	}
	if len(d.enc)-d.at < 1+bl+c*d.m.elem {
		return d.corrupt("bitmap of %d elements needs %d bytes, %d left", c, 1+bl+c*d.m.elem, len(d.enc)-d.at)
	}
	d.at += 1 + bl
	if d.dst != nil {
		d.bitmapValues(bm)
	}
	d.at += c * d.m.elem
	d.b++
	return nil
}

// blockPieces returns the pieces of the current block's elements in the
// destination, the element size (as an int and an int64) and where its
// values start in the encoding.
func (d *decoder) blockPieces() (ps []piece, elem int, e64, at int64) {
	p, nb, _ := d.block()
	if d.flat {
		d.ps[0] = piece{d.m.r.Offset + p, nb}
		return d.ps[:1], d.m.elem, int64(d.m.elem), int64(d.at)
	}
	d.w.seek(p)
	ps = d.w.block(d.ps[:0], nb)
	return ps, d.m.elem, int64(d.m.elem), int64(d.at)
}

// bitmapValues writes the values at d.at to the current block's elements
// that bm marks (checked), 64 bits at a time.
func (d *decoder) bitmapValues(bm []byte) {
	ps, elem, e64, at := d.blockPieces()
	if len(ps) == 1 {
		o := ps[0].off
		for j := 0; j < len(bm); j += 8 {
			for x := word(bm[j:]); x != 0; x &= x - 1 {
				i := int64(j*8 + bits.TrailingZeros64(x))
				put(d.dst, o+i*e64, d.enc, at, elem)
				at += e64
			}
		}
		return
	}
	l := locator{ps: ps}
	for j := 0; j < len(bm); j += 8 {
		for x := word(bm[j:]); x != 0; x &= x - 1 {
			i := int64(j*8 + bits.TrailingZeros64(x))
			put(d.dst, l.at(i*e64), d.enc, at, elem)
			at += e64
		}
	}
}

// values writes the values at d.at to the current block's elements idx
// (checked, increasing).
func (d *decoder) values(idx []byte) {
	ps, elem, e64, at := d.blockPieces()
	if len(ps) == 1 {
		o := ps[0].off
		for _, i := range idx {
			put(d.dst, o+int64(i)*e64, d.enc, at, elem)
			at += e64
		}
		return
	}
	l := locator{ps: ps}
	for _, i := range idx {
		put(d.dst, l.at(int64(i)*e64), d.enc, at, elem)
		at += e64
	}
}
