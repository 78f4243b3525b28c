package delta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/strided"
)

// region is one message's two sides: a box of count elements at rel in a
// source buffer of shape src and at drel in a destination buffer of shape
// dst.
type region struct {
	count, src, rel, dst, drel []int64
}

func (g region) descs(elem int) (s, d strided.Desc, srcBytes, dstBytes int) {
	s = strided.DescribeInto(g.src, g.rel, g.count, int64(elem), nil)
	d = strided.DescribeInto(g.dst, g.drel, g.count, int64(elem), nil)
	return s, d, int(prod(g.src)) * elem, int(prod(g.dst)) * elem
}

func prod(xs []int64) int64 {
	p := int64(1)
	for _, x := range xs {
		p *= x
	}
	return p
}

var regions = map[string]region{
	"contiguous": {count: []int64{5000}, src: []int64{5000}, rel: []int64{0}, dst: []int64{5000}, drel: []int64{0}},
	// three outer dims on the source, two on the destination, runs of
	// 50 and 37*50 elements... blocks cross runs on both sides.
	"strided3d": {count: []int64{3, 37, 50}, src: []int64{5, 40, 64}, rel: []int64{1, 2, 7},
		dst: []int64{4, 37, 80}, drel: []int64{1, 0, 13}},
	// runs shorter than a word and than a block.
	"narrow": {count: []int64{4, 6, 300, 3}, src: []int64{4, 7, 301, 5}, rel: []int64{0, 1, 1, 2},
		dst: []int64{5, 6, 300, 3}, drel: []int64{1, 0, 0, 0}},
}

// gather returns region d of buf in run order (the message's logical
// elements), the dense reference.
func gather(buf []byte, d strided.Desc) []byte {
	var out []byte
	if d.Bytes() == 0 {
		return out
	}
	d.ForEachRun(func(off int64) { out = append(out, buf[off:off+d.Run]...) })
	return out
}

func scatter(buf []byte, d strided.Desc, logical []byte) {
	if d.Bytes() == 0 {
		return
	}
	at := int64(0)
	d.ForEachRun(func(off int64) { at += int64(copy(buf[off:off+d.Run], logical[at:])) })
}

// change returns a copy of buf with the elements that pick chooses
// (indices into region d's elements) given different bits.
func change(r *rand.Rand, buf []byte, d strided.Desc, elem int, picks []int64) []byte {
	logical := gather(buf, d)
	for _, i := range picks {
		x := 1 + r.Uint32N(1<<(8*elem)-1) // a non-zero xor: the bits differ
		if elem == 4 {
			x = max(r.Uint32(), 1)
		}
		for b := range elem {
			logical[int(i)*elem+b] ^= byte(x >> (8 * b))
		}
	}
	out := bytes.Clone(buf)
	scatter(out, d, logical)
	return out
}

// picks chooses about density*n distinct elements of n: uniformly, or in
// clusters of 64 consecutive elements (at a random shift).
func picks(r *rand.Rand, n int64, density float64, clustered bool) []int64 {
	want := int64(density*float64(n) + 0.5)
	if density > 0 && want == 0 {
		want = 1
	}
	if !clustered {
		out := make([]int64, want)
		for i, p := range r.Perm(int(n))[:want] {
			out[i] = int64(p)
		}
		return out
	}
	var out []int64
	shift := r.Int64N(64)
	for _, c := range r.Perm(int((n + 63) / 64)) {
		for i := int64(c) * 64; i < int64(c)*64+64 && int64(len(out)) < want; i++ {
			if i < n {
				out = append(out, (i+shift)%n)
			}
		}
	}
	return out
}

var densities = []float64{0, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1}

// TestRoundTrip encodes every region, element size, density and pattern,
// applies the message to a destination holding the previous version, and
// checks every byte of it against the dense reference; then checks
// UpdatePrev and that applying the message to prev commits it.
func TestRoundTrip(t *testing.T) {
	for name, g := range regions {
		for _, elem := range []int{1, 2, 4} {
			for _, dens := range densities {
				for _, cl := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/e%d/d%g/clustered=%v", name, elem, dens, cl), func(t *testing.T) {
						roundTrip(t, g, elem, dens, cl)
					})
				}
			}
		}
	}
}

func roundTrip(t *testing.T, g region, elem int, dens float64, clustered bool) {
	r := rand.New(rand.NewPCG(uint64(elem), uint64(dens*1e6)))
	sd, dd, sn, dn := g.descs(elem)
	prev := randBytes(r, sn)
	elems := sd.Bytes() / int64(elem)
	cur := change(r, prev, sd, elem, picks(r, elems, dens, clustered))
	// The destination holds prev's box, and other bytes around it.
	dst := randBytes(r, dn)
	scatter(dst, dd, gather(prev, sd))
	want := bytes.Clone(dst)
	scatter(want, dd, gather(cur, sd))

	max, err := MaxEncodedLen(sd, elem)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, max)
	var e Encoder
	n, err := e.Encode(prev, cur, sd, elem, out)
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Bytes != int64(n) || st.Skipped+st.Lists+st.Bitmaps+st.Dense != st.Blocks || st.Elems != elems {
		t.Fatalf("stats %+v for %d bytes of %d elements", st, n, elems)
	}
	if l, err := EncodedLen(out); err != nil || l != n {
		t.Fatalf("EncodedLen %d, %v; Encode wrote %d", l, err, n)
	}
	if err := Apply(dst, dd, elem, out); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(dst, want); i >= 0 {
		t.Fatalf("destination byte %d: %#x, want %#x (stats %+v)", i, dst[i], want[i], st)
	}
	// Committing by applying the message to prev (source layout).
	p2 := bytes.Clone(prev)
	if err := Apply(p2, sd, elem, out[:n]); err != nil {
		t.Fatal(err)
	}
	wantPrev := bytes.Clone(prev)
	scatter(wantPrev, sd, gather(cur, sd))
	if i := firstDiff(p2, wantPrev); i >= 0 {
		t.Fatalf("prev after Apply: byte %d differs", i)
	}
	// UpdatePrev leaves prev equal to cur over the region, and as it was
	// elsewhere; the encoding is the same.
	e2 := Encoder{UpdatePrev: true}
	p3 := bytes.Clone(prev)
	out2 := make([]byte, max)
	n2, err := e2.Encode(p3, cur, sd, elem, out2)
	if err != nil || !bytes.Equal(out[:n], out2[:n2]) {
		t.Fatalf("UpdatePrev: %v, same encoding %v", err, bytes.Equal(out[:n], out2[:n2]))
	}
	if i := firstDiff(p3, wantPrev); i >= 0 {
		t.Fatalf("prev after UpdatePrev: byte %d differs", i)
	}
	// Encoding again against the updated prev sends nothing.
	if n, _ := e.Encode(p3, cur, sd, elem, out); int64(n) > HeaderLen+opLen*((st.Blocks+maxOpBlocks-1)/maxOpBlocks) {
		t.Fatalf("unchanged region encoded in %d bytes", n)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestFirstStep: a nil prev sends everything dense, at MaxEncodedLen.
func TestFirstStep(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sd, dd, sn, dn := regions["strided3d"].descs(2)
	cur := randBytes(r, sn)
	max, _ := MaxEncodedLen(sd, 2)
	out := make([]byte, max)
	var e Encoder
	n, err := e.Encode(nil, cur, sd, 2, out)
	if err != nil || int64(n) != max || e.Stats().Dense != e.Stats().Blocks {
		t.Fatalf("Encode(nil prev): %d bytes of %d, %v, %+v", n, max, err, e.Stats())
	}
	dst := make([]byte, dn)
	if err := Apply(dst, dd, 2, out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gather(dst, dd), gather(cur, sd)) {
		t.Fatal("first step: destination differs")
	}
	prev := make([]byte, sn)
	if err := Commit(prev, cur, sd, 2); err != nil || !bytes.Equal(gather(prev, sd), gather(cur, sd)) {
		t.Fatalf("Commit: %v", err)
	}
}

// TestBitwise: NaNs with different payloads, and -0 against +0, are
// changes; the same NaN bits are not.
func TestBitwise(t *testing.T) {
	prev := []byte{0xC1, 0x7F, 0x00, 0x80, 0xC1, 0x7F, 0x00, 0x00} // bf16 NaN, -0, NaN, +0
	cur := []byte{0xC2, 0x7F, 0x00, 0x00, 0xC1, 0x7F, 0x00, 0x00}  // other NaN payload, +0, same NaN, +0
	d := strided.Desc{Run: 8}
	out := make([]byte, 64)
	var e Encoder
	if _, err := e.Encode(prev, cur, d, 2, out); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Values != 2 || st.Lists+st.Bitmaps != 1 {
		t.Fatalf("stats %+v: want 2 changed values in one block", st)
	}
	dst := bytes.Clone(prev)
	if err := Apply(dst, d, 2, out); err != nil || !bytes.Equal(dst, cur) {
		t.Fatalf("Apply: %v, %x, want %x", err, dst, cur)
	}
}

// TestErrors: bad arguments wrap ErrInvalid.
func TestErrors(t *testing.T) {
	buf := make([]byte, 100)
	out := make([]byte, 200)
	var e Encoder
	for name, c := range map[string]struct {
		d    strided.Desc
		elem int
		out  []byte
	}{
		"elem 3":      {strided.Desc{Run: 12}, 3, out},
		"cut element": {strided.Desc{Run: 3}, 2, out},
		"outside":     {strided.Desc{Offset: 90, Run: 12}, 2, out},
		"short out":   {strided.Desc{Run: 100}, 2, out[:100]},
		"negative":    {strided.Desc{Run: 4, Count: []int64{-1}, Stride: []int64{4}}, 2, out},
	} {
		if _, err := e.Encode(buf, buf, c.d, c.elem, c.out); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Encode: %v, want ErrInvalid", name, err)
		}
		if c.d.Offset == 0 && c.elem == 2 && len(c.out) == len(out) {
			if err := Apply(buf, c.d, c.elem, out); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: Apply: %v, want ErrInvalid", name, err)
			}
		}
	}
	if _, err := e.Encode(buf[:10], buf, strided.Desc{Run: 20}, 2, out); !errors.Is(err, ErrInvalid) {
		t.Errorf("short prev: %v", err)
	}
}
