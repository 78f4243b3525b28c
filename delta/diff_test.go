package delta

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestScanAVX2MatchesWords encodes every region, element size, density
// and pattern of TestRoundTrip, and densities around the list, bitmap
// and dense limits, with the AVX2 scan of changed blocks and with the
// word scan alone, and requires the same encoding byte for byte and the
// same stats (and prev, with UpdatePrev). Without AVX2 it says so.
func TestScanAVX2MatchesWords(t *testing.T) {
	setAVX2(true)
	defer setAVX2(true)
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU (or purego): the word scan is the only one")
	}
	dens := append([]float64{0.11, 0.125, 0.13, 0.9, 0.94, 0.97}, densities...)
	n := 0
	for name, g := range regions {
		for _, elem := range []int{1, 2, 4} {
			for _, d := range dens {
				for _, cl := range []bool{false, true} {
					r := rand.New(rand.NewPCG(uint64(elem), uint64(d*1e6)))
					sd, _, sn, _ := g.descs(elem)
					prev := randBytes(r, sn)
					cur := change(r, prev, sd, elem, picks(r, sd.Bytes()/int64(elem), d, cl))
					max, err := MaxEncodedLen(sd, elem)
					if err != nil {
						t.Fatal(err)
					}
					var outs [2][]byte
					var stats [2]Stats
					var prevs [2][]byte
					for k, on := range []bool{true, false} {
						setAVX2(on)
						e := Encoder{UpdatePrev: true}
						p := bytes.Clone(prev)
						out := make([]byte, max)
						m, err := e.Encode(p, cur, sd, elem, out)
						if err != nil {
							t.Fatal(err)
						}
						outs[k], stats[k], prevs[k] = out[:m], e.Stats(), p
					}
					what := fmt.Sprintf("%s/e%d/d%g/clustered=%v", name, elem, d, cl)
					if !bytes.Equal(outs[0], outs[1]) || stats[0] != stats[1] || !bytes.Equal(prevs[0], prevs[1]) {
						t.Errorf("%s: the AVX2 scan encodes %d bytes (%+v), the word scan %d (%+v)", what, len(outs[0]), stats[0], len(outs[1]), stats[1])
					}
					if stats[0].Lists+stats[0].Bitmaps > 0 {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no case encoded a list or a bitmap: the scan was not exercised")
	}
}

// TestDiffMasks compares diffMasksAVX2 with a byte loop on random
// chunks, 0 to 16 of them, with 0 to 64 bytes changed each.
func TestDiffMasks(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU (or purego)")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for it := range 200 {
		k := it % 17
		a := randBytes(r, 64*k+1)
		b := bytes.Clone(a)
		for range r.IntN(64*k + 1) {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
		out := make([]uint64, k+1)
		out[k] = 0xdead
		if k > 0 {
			diffMasksAVX2(&a[0], &b[0], k, &out[0])
		}
		for j := range k {
			var want uint64
			for i := range 64 {
				if a[64*j+i] != b[64*j+i] {
					want |= 1 << i
				}
			}
			if out[j] != want {
				t.Fatalf("chunk %d of %d: mask %x, want %x", j, k, out[j], want)
			}
		}
		if out[k] != 0xdead {
			t.Fatalf("%d chunks: wrote past them", k)
		}
	}
}
