package delta

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/strided"
)

// sized encodes n elements of elem bytes, contiguous, with the changes
// picked at density, and checks the round trip; it returns the encoded
// length, the stats, and the bytes a digest scheme would send: every
// block of digestBlock bytes holding a change, whole.
func sized(t testing.TB, n int64, elem int, dens float64, clustered bool, digestBlock int64) (int, Stats, int64) {
	r := rand.New(rand.NewPCG(uint64(elem), uint64(dens*1e9)))
	d := strided.Desc{Run: n * int64(elem)}
	prev := randBytes(r, int(d.Run))
	ch := picks(r, n, dens, clustered)
	cur := change(r, prev, d, elem, ch)
	blocks := map[int64]bool{}
	for _, i := range ch {
		blocks[i*int64(elem)/digestBlock] = true
	}
	max, _ := MaxEncodedLen(d, elem)
	out := make([]byte, max)
	var e Encoder
	l, err := e.Encode(prev, cur, d, elem, out)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(prev, d, elem, out); err != nil || !bytes.Equal(prev, cur) {
		t.Fatalf("round trip: %v", err)
	}
	return l, e.Stats(), int64(len(blocks)) * digestBlock
}

// TestSizes checks the encoded sizes that the targets rest on, on
// 1 Mi bf16 elements (2 MiB): at 1% uniform changes a message is at most
// 2.2% of the dense bytes (the encoding's expectation is 1.93%: 92% of
// blocks hold a change, sent as a list of 2 bytes plus 3 per change; the
// issue asks for at most 12%), at 100% it is dense plus HeaderLen and one
// op, with nothing changed HeaderLen and one op. -v prints the table, and
// beside it what a per-block digest (in place of prev's copy) would send:
// the changed blocks whole.
func TestSizes(t *testing.T) {
	const n = 1 << 20
	dense := float64(2 * n)
	var tab strings.Builder
	fmt.Fprintf(&tab, "%-8s %-9s %8s %8s %8s %8s  %s\n", "density", "pattern", "delta", "lists", "bitmaps", "dense", "digest 512 B / 4 KiB blocks")
	for _, cl := range []bool{false, true} {
		for _, dens := range densities {
			l, st, dig512 := sized(t, n, 2, dens, cl, 512)
			_, _, dig4k := sized(t, n, 2, dens, cl, 4096)
			pat := map[bool]string{false: "uniform", true: "clustered"}[cl]
			fmt.Fprintf(&tab, "%-8g %-9s %7.3f%% %8d %8d %8d  %6.2f%% / %6.2f%%\n", dens, pat, 100*float64(l)/dense,
				st.Lists, st.Bitmaps, st.Dense, 100*float64(dig512)/dense, 100*float64(dig4k)/dense)
			switch {
			case dens == 0 && l != HeaderLen+opLen:
				t.Errorf("nothing changed: %d bytes, want %d", l, HeaderLen+opLen)
			case dens == 0.01 && !cl && float64(l) > 0.022*dense:
				t.Errorf("1%% uniform: %d bytes, %.2f%% of dense, want at most 2.2%% (issue: 12%%)", l, 100*float64(l)/dense)
			case dens == 1 && l != int(dense)+HeaderLen+opLen:
				t.Errorf("all changed: %d bytes, want dense %d + %d", l, int(dense), HeaderLen+opLen)
			}
		}
	}
	t.Logf("bf16, %d elements, encoded bytes as a share of the dense bytes:\n%s", n, tab.String())
}

// TestElemSizes: at 1% uniform changes, 1- and 4-byte elements too stay
// far below the 12% (lists: 2 bytes per block, 1+elem per change).
func TestElemSizes(t *testing.T) {
	for elem, bound := range map[int]float64{1: 0.03, 4: 0.0155} {
		l, _, _ := sized(t, 1<<20, elem, 0.01, false, 512)
		got := float64(l) / float64(elem<<20)
		t.Logf("%d-byte elements, 1%% uniform: %.3f%% of dense", elem, 100*got)
		if got > bound {
			t.Errorf("%d-byte elements at 1%%: %.2f%% of dense, want at most %.2f%%", elem, 100*got, 100*bound)
		}
	}
}

// TestFallback: blocks of 241 changes in 256 each pick a bitmap 3 bytes
// over the block's own bytes (one less than dense's op header), so that
// block by block exceeds dense: the message goes dense at MaxEncodedLen.
func TestFallback(t *testing.T) {
	const n = 256 * 40
	r := rand.New(rand.NewPCG(5, 5))
	d := strided.Desc{Run: 2 * n}
	prev := randBytes(r, 2*n)
	var ch []int64
	for b := int64(0); b < n/256; b++ {
		for _, i := range r.Perm(256)[:241] {
			ch = append(ch, b*256+int64(i))
		}
	}
	cur := change(r, prev, d, 2, ch)
	max, _ := MaxEncodedLen(d, 2)
	out := make([]byte, max)
	e := Encoder{UpdatePrev: true}
	p := bytes.Clone(prev)
	l, err := e.Encode(p, cur, d, 2, out)
	if err != nil || int64(l) != max || !e.Stats().Fallback || !bytes.Equal(p, cur) {
		t.Fatalf("Encode: %d bytes of %d, %v, %+v, prev updated %v", l, max, err, e.Stats(), bytes.Equal(p, cur))
	}
	if err := Apply(prev, d, 2, out); err != nil || !bytes.Equal(prev, cur) {
		t.Fatalf("Apply: %v", err)
	}
}

// TestSampledDense: after a dense block, a block whose 8 sampled words
// (every 64 bytes for bf16) changed in full goes dense uncounted, though
// its 32 changes would fit a bitmap; without the dense block before it,
// it goes as the bitmap. Both round-trip.
func TestSampledDense(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	d := strided.Desc{Run: 2 * 2 * 256}
	prev := randBytes(r, int(d.Run))
	var sampled []int64
	for k := int64(0); k < 8; k++ {
		for l := int64(0); l < 4; l++ {
			sampled = append(sampled, 256+32*k+l)
		}
	}
	var all []int64
	for i := int64(0); i < 256; i++ {
		all = append(all, i)
	}
	for _, c := range []struct {
		first        []int64
		dense, bitmp int64
	}{{all, 2, 0}, {nil, 0, 1}} {
		cur := change(r, change(r, prev, d, 2, c.first), d, 2, sampled)
		out := make([]byte, d.Run+HeaderLen+opLen)
		var e Encoder
		if _, err := e.Encode(prev, cur, d, 2, out); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.Dense != c.dense || st.Bitmaps != c.bitmp {
			t.Errorf("first block changed %v: %+v, want %d dense and %d bitmap blocks", c.first != nil, st, c.dense, c.bitmp)
		}
		p := bytes.Clone(prev)
		if err := Apply(p, d, 2, out); err != nil || !bytes.Equal(p, cur) {
			t.Fatalf("round trip: %v", err)
		}
	}
}
