package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQdivExact checks the quantize kernels' fast division against the
// true float32 division, as the E4M3 rounding sees them: every finite bf16
// value divided by scales made as the rule makes them (amax times
// float32(1/448)) from amaxes across the range, and random float32 pairs.
func TestQdivExact(t *testing.T) {
	r448 := math.Float32frombits(0x3B124925)
	rnd := rand.New(rand.NewPCG(3, 14))
	var scales []float32
	for e := -30; e <= 30; e += 3 {
		for k := 0; k < 6; k++ {
			amax := float32(math.Ldexp(1+rnd.Float64(), e))
			scales = append(scales, amax*r448)
		}
	}
	scales = append(scales, 1, 448*r448, float32(math.Ldexp(1, -20))*r448)
	var x, s []float32
	var pairs int64
	flush := func() {
		if bad := QdivMismatches(x, s); bad != 0 {
			t.Fatalf("%d of %d pairs round differently through the fast division", bad, len(x))
		}
		pairs += int64(len(x))
		x, s = x[:0], s[:0]
	}
	for b := 0; b < 1<<16; b++ {
		v := math.Float32frombits(uint32(b) << 16)
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		for _, sc := range scales {
			x, s = append(x, v), append(s, sc)
		}
		if len(x) > 1<<20 {
			flush()
		}
	}
	for i := 0; i < 4<<20; i++ {
		sc := math.Float32frombits(0x20000000 + rnd.Uint32N(0x3F000000))
		v := math.Float32frombits(rnd.Uint32()&^(0xFF<<23) | (uint32(rnd.IntN(200)+27) << 23))
		x, s = append(x, v), append(s, sc)
		if len(x) > 1<<20 {
			flush()
		}
	}
	// where it matters: quotients a few ulps either side of every E4M3
	// midpoint (and of the range's ends), for many scales.
	for i := 0; i < 2000; i++ {
		sc := math.Float32frombits(0x30000000 + rnd.Uint32N(0x1E000000))
		for e := -6; e <= 8; e++ {
			for m := 0; m < 8; m++ {
				mid := math.Ldexp(1+(float64(m)+0.5)/8, e) // between two E4M3 values
				for _, target := range []float64{mid, math.Ldexp(1, e)} {
					x0 := float32(target * float64(sc))
					for d := -6; d <= 6; d++ {
						xb := int64(math.Float32bits(x0)) + int64(d)
						x, s = append(x, math.Float32frombits(uint32(xb))), append(s, sc)
					}
				}
			}
		}
		if len(x) > 1<<20 {
			flush()
		}
	}
	flush()
	t.Logf("%d pairs, every one rounded as the true division rounds", pairs)
}
