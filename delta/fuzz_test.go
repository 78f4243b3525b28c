package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/strided"
)

// refApply is the format's reference decoder, element by element on the
// message's logical elements (the destination region gathered): the
// result, or false for an encoding Apply must refuse.
func refApply(logical []byte, elem int, enc []byte) ([]byte, bool) {
	le := binary.LittleEndian
	elems := len(logical) / elem
	if len(enc) < 24 || string(enc[:4]) != "M2ND" || enc[4] != 1 || int(enc[5]) != elem || enc[6] != 8 || enc[7] != 0 ||
		le.Uint64(enc[8:]) != uint64(elems) || le.Uint64(enc[16:]) < 24 || le.Uint64(enc[16:]) > uint64(len(enc)) {
		return nil, false
	}
	enc = enc[:le.Uint64(enc[16:])]
	out := slices.Clone(logical)
	nblocks := (elems + 255) / 256
	at, b := 24, 0
	for at < len(enc) {
		if b >= nblocks {
			return nil, false
		}
		first := b * 256
		ne := min(256, elems-first)
		need := func(n int) bool { return len(enc)-at >= n }
		switch enc[at] {
		case 1, 2:
			if !need(5) {
				return nil, false
			}
			k := int(le.Uint32(enc[at+1:]))
			if k == 0 || b+k > nblocks {
				return nil, false
			}
			at += 5
			if enc[at-5] == 2 {
				nb := (min((b+k)*256, elems) - first) * elem
				if !need(nb) {
					return nil, false
				}
				copy(out[first*elem:], enc[at:at+nb])
				at += nb
			}
			b += k
		case 3:
			if !need(2) {
				return nil, false
			}
			c := int(enc[at+1]) + 1
			if c > ne || !need(2+c+c*elem) {
				return nil, false
			}
			for j := range c {
				i := int(enc[at+2+j])
				if i >= ne || (j > 0 && i <= int(enc[at+1+j])) {
					return nil, false
				}
				copy(out[(first+i)*elem:(first+i+1)*elem], enc[at+2+c+j*elem:])
			}
			at += 2 + c + c*elem
			b++
		case 4:
			bl := (ne + 7) / 8
			if !need(1 + bl) {
				return nil, false
			}
			var set []int
			for i := range bl * 8 {
				if enc[at+1+i/8]>>(i%8)&1 != 0 {
					set = append(set, i)
				}
			}
			if len(set) == 0 || set[len(set)-1] >= ne || !need(1+bl+len(set)*elem) {
				return nil, false
			}
			for j, i := range set {
				copy(out[(first+i)*elem:(first+i+1)*elem], enc[at+1+bl+j*elem:])
			}
			at += 1 + bl + len(set)*elem
			b++
		default:
			return nil, false
		}
	}
	return out, b == nblocks
}

var fuzzRegions = []string{"contiguous", "strided3d", "narrow"}

// FuzzApply applies arbitrary bytes (seeded with real encodings of every
// op, truncated and not) to a destination region and compares Apply with
// refApply: the same refusals, the same result, nothing written outside
// the region or on a refusal, no panic. Failures land in
// testdata/fuzz/FuzzApply.
func FuzzApply(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 7))
	for k := range 9 {
		g, elem := fuzzRegions[k%3], []int{1, 2, 4}[k/3]
		sd, _, sn, _ := regions[g].descs(elem)
		prev := randBytes(r, sn)
		for _, dens := range []float64{0, 0.01, 0.3, 1} {
			cur := change(r, prev, sd, elem, picks(r, sd.Bytes()/int64(elem), dens, k%2 == 0))
			out := make([]byte, sd.Bytes()+100)
			var e Encoder
			n, _ := e.Encode(prev, cur, sd, elem, out)
			f.Add(uint64(k), uint8(k), out[:n])
			f.Add(uint64(k), uint8(k), out[:n/2])
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, kind uint8, enc []byte) {
		g, elem := fuzzRegions[int(kind)%3], []int{1, 2, 4}[int(kind/3)%3]
		_, dd, _, dn := regions[g].descs(elem)
		dst := randBytes(rand.New(rand.NewPCG(seed, 0)), dn)
		orig := bytes.Clone(dst)
		want, ok := refApply(gather(dst, dd), elem, enc)
		err := Apply(dst, dd, elem, enc)
		if (err == nil) != ok {
			t.Fatalf("Apply: %v; the reference decoder accepts it: %v", err, ok)
		}
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Apply: %v is not a *CorruptError", err)
			}
			if !bytes.Equal(dst, orig) {
				t.Fatal("a refused encoding changed the destination")
			}
			return
		}
		full := bytes.Clone(orig)
		scatter(full, dd, want)
		if i := firstDiff(dst, full); i >= 0 {
			t.Fatalf("destination byte %d: %#x, want %#x", i, dst[i], full[i])
		}
	})
}

// FuzzRoundTrip encodes random changes of a random strided region (up to
// three outer dims, any element size, any density) against a
// destination of another layout and checks every byte.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint32(0x12345678), uint16(100), uint8(0))
	f.Add(uint64(2), uint32(0xFFFFFFFF), uint16(65535), uint8(5))
	f.Add(uint64(3), uint32(0), uint16(0), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, shape uint32, dens uint16, kind uint8) {
		nd := 1 + int(kind/3)%4
		g := region{}
		for d := range nd {
			c := 1 + int64(shape>>(8*d)&0xFF)%23
			if d == nd-1 {
				c *= 1 + int64(shape>>27)
			}
			pad := int64(kind>>d&1) * (1 + int64(seed>>(4*d))%5)
			lo := int64(seed>>(8*d+20)) % (pad + 1)
			g.count = append(g.count, c)
			g.src = append(g.src, c+pad)
			g.rel = append(g.rel, lo)
			g.dst = append(g.dst, c+pad/2)
			g.drel = append(g.drel, min(lo, pad/2))
		}
		roundTrip(t, g, []int{1, 2, 4}[int(kind)%3], float64(dens)/65535, kind&0x80 != 0)
	})
}

// TestCorrupt truncates and damages real encodings: every refusal is a
// *CorruptError naming a block (the header where the header is at fault)
// and leaves the destination as it was.
func TestCorrupt(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sd, dd, sn, dn := regions["strided3d"].descs(2)
	prev := randBytes(r, sn)
	// clustered 20%: every op appears.
	cur := change(r, prev, sd, 2, picks(r, sd.Bytes()/2, 0.2, true))
	cur = change(r, cur, sd, 2, picks(r, sd.Bytes()/2, 0.01, false))
	var span []int64
	for i := int64(3000); i < 3600; i++ {
		span = append(span, i)
	}
	cur = change(r, cur, sd, 2, span)
	out := make([]byte, sd.Bytes()+HeaderLen+opLen)
	var e Encoder
	n, err := e.Encode(prev, cur, sd, 2, out)
	if st := e.Stats(); err != nil || st.Skipped == 0 || st.Lists == 0 || st.Bitmaps == 0 || st.Dense == 0 {
		t.Fatalf("want every op: %v, %+v", err, st)
	}
	enc := out[:n]
	dst := randBytes(r, dn)
	orig := bytes.Clone(dst)
	refuse := func(what string, bad []byte, header bool) {
		t.Helper()
		err := Apply(dst, dd, 2, bad)
		var ce *CorruptError
		if !errors.As(err, &ce) || (ce.Block < 0) != header {
			t.Fatalf("%s: Apply: %v, want a corrupt error (in the header: %v)", what, err, header)
		}
		if !bytes.Equal(dst, orig) {
			t.Fatalf("%s: the destination changed", what)
		}
	}
	for l := range n {
		refuse("truncated", enc[:l], true)
		if l >= HeaderLen {
			// the header says l bytes: the body is cut.
			cut := bytes.Clone(enc[:l])
			binary.LittleEndian.PutUint64(cut[16:], uint64(l))
			refuse("cut", cut, false)
		}
	}
	for i := range HeaderLen {
		if i >= 16 && i < 20 {
			continue // raising the length is caught at the body
		}
		bad := bytes.Clone(enc)
		bad[i] ^= 0x40
		refuse("header", bad, true)
	}
	if err := Apply(dst, strided.Desc{Run: dd.Bytes()}, 4, enc); err == nil {
		t.Fatal("an encoding of 2-byte elements applied as 4-byte elements")
	}
	if err := Apply(dst, strided.Desc{Run: dd.Bytes() - 2}, 2, enc); err == nil {
		t.Fatal("an encoding applied to a region of another size")
	}
	// Damaged ops, compared with the reference decoder.
	logical := gather(dst, dd)
	for range 2000 {
		bad := bytes.Clone(enc)
		bad[HeaderLen+r.IntN(n-HeaderLen)] = byte(r.Uint32())
		want, ok := refApply(logical, 2, bad)
		d := bytes.Clone(dst)
		err := Apply(d, dd, 2, bad)
		if (err == nil) != ok || (ok && !bytes.Equal(gather(d, dd), want)) {
			t.Fatalf("damaged op: Apply %v, reference accepts %v", err, ok)
		}
	}
}

// TestOpSplit lowers the most blocks an op covers, so that skip and dense
// runs split and MaxEncodedLen counts several ops.
func TestOpSplit(t *testing.T) {
	defer func(k int64) { maxOpBlocks = k }(maxOpBlocks)
	maxOpBlocks = 3
	for _, dens := range []float64{0, 0.002, 0.9, 1} {
		roundTrip(t, regions["contiguous"], 2, dens, true)
		roundTrip(t, regions["narrow"], 1, dens, false)
	}
	m, _ := MaxEncodedLen(strided.Desc{Run: 2 * 256 * 7}, 2)
	if m != 2*256*7+HeaderLen+3*opLen {
		t.Fatalf("MaxEncodedLen %d with 7 blocks, 3 per op", m)
	}
}
