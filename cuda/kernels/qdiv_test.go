package kernels

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
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
	var fx, fs []float32
	flush := func() {
		for _, mode := range []Div{Midpoint, Bracket} {
			if bad := QdivMismatches(x, s, mode); bad != 0 {
				t.Fatalf("%d of %d pairs round differently through the fast division (mode %d)", bad, len(x), mode)
			}
		}
		// m2n_qfma wants a finite quotient, as the rule's are (|x| <= amax,
		// so |x/s| <= 448 and a little)
		fx, fs = fx[:0], fs[:0]
		for i := range x {
			if math.Abs(float64(x[i])/float64(s[i])) < 0x1p126 {
				fx, fs = append(fx, x[i]), append(fs, s[i])
			}
		}
		if bad := QdivMismatches(fx, fs, FMA); bad != 0 {
			t.Fatalf("%d of %d pairs round differently through the corrected multiply", bad, len(fx))
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

// TestQdivSweep checks the argument of m2n_qdiv (quant.h) where it counts:
// every bfloat16 significand against float32 scale significands, in the
// interior binade (quotients in (1/2, 2): it stands for every binade
// strictly inside the E4M3 range, since scaling x or s by a power of two
// scales both quotients alike) and in the four binades that meet the
// range's ends (quotients around 2^-6 and 448), where the fast path's
// margins decide. It checks the bound the argument rests on, that the
// multiply's quotient is within 4 float32 steps of the division's, and
// that every pair rounds to the byte the true division rounds to. By
// default every 7th scale significand in the interior and every 61st at the
// ends (a few seconds); M2N_QDIV_FULL=1 checks all 2^23 in each binade,
// 5 x 2^30 pairs, spread over the machine's cores (scripts/gpu-fp8-check.sh
// runs it on the GPU machine). The same for the bracket test
// (m2n_q2_bracket), with fewer scale significands by default.
func TestQdivSweep(t *testing.T) {
	steps := map[int]uint32{0: 7, -6: 61, -5: 61, 8: 61, 9: 61}
	if testing.Short() {
		steps = map[int]uint32{0: 97, -6: 997, -5: 997, 8: 997, 9: 997}
	}
	if os.Getenv("M2N_QDIV_FULL") == "1" {
		steps = map[int]uint32{0: 1, -6: 1, -5: 1, 8: 1, 9: 1}
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), 128))
	sweep(t, steps, workers, false)
	// the bracket test costs several times as much here: by default every
	// 4th of those scale significands (all with M2N_QDIV_FULL=1)
	for k, s := range steps {
		if s > 1 {
			steps[k] = 4*s + 1
		}
	}
	sweep(t, steps, workers, true)
}

// sweep runs TestQdivSweep's binades through m2n_qdiv or, with bracket,
// m2n_q2_bracket.
func sweep(t *testing.T, steps map[int]uint32, workers int, bracket bool) {
	for _, k := range []int{0, -6, -5, 8, 9} {
		var mu sync.Mutex
		var bad, fast int64
		var worst uint32
		var wg sync.WaitGroup
		for w := range workers {
			i0, i1 := 128*w/workers, 128*(w+1)/workers
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, f, m := QdivSweep(k, i0, i1, steps[k], bracket)
				mu.Lock()
				bad, fast, worst = bad+b, fast+f, max(worst, m)
				mu.Unlock()
			}()
		}
		wg.Wait()
		pairs := int64(128) * int64((1<<23+steps[k]-1)/steps[k])
		if bad != 0 {
			t.Errorf("quotients in [2^%d, 2^%d), bracket test %v: %d of %d pairs round differently through the fast division", k-1, k+1, bracket, bad, pairs)
		}
		if worst > 4 {
			t.Errorf("quotients in [2^%d, 2^%d): the multiply's quotient is %d float32 steps from the division's, the argument allows 4", k-1, k+1, worst)
		}
		t.Logf("quotients in [2^%d, 2^%d), bracket test %v: %d pairs (every %d-th scale significand), %d by the multiply (at most %d steps from the division), all exact",
			k-1, k+1, bracket, pairs, steps[k], fast, worst)
	}
}

// TestQfmaSweep checks m2n_qfma (quant.h), the corrected multiply, where
// its claim rests on this test and not on a theorem: every bfloat16
// significand of either sign, and the zeros, divided by scales in binades
// from 2^-90 (the smallest m2n_qfma_ok takes) to 2^119 (the rule's
// largest scales), with quotients from the rule's largest, 2^9, down
// through E4M3's subnormals and zero to float32 subnormals; E4M3 bytes
// compared with the true division's. By default every 997th scale
// significand (every 4999th with -short); M2N_QDIV_FULL=1 every 5th, about
// 3.4 x 10^10 pairs (scripts/gpu-fp8-check.sh runs it on the GPU machine).
func TestQfmaSweep(t *testing.T) {
	step := uint32(997)
	if testing.Short() {
		step = 4999
	}
	if os.Getenv("M2N_QDIV_FULL") == "1" {
		step = 5
	}
	type job struct{ sb, k int }
	var jobs []job
	for _, sb := range []int{-90, -89, -60, 0, 118, 119} {
		for _, dk := range []int{9, 8, 1, 0, -1, -6, -7, -10, -11, -20} {
			if k := sb + dk; k >= -133 && k <= 127 {
				jobs = append(jobs, job{sb, k})
			}
		}
		jobs = append(jobs, job{sb, -126}, job{sb, -127}, job{sb, -133})
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), 128))
	var mu sync.Mutex
	var bad, exact, pairs int64
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				b, e := QfmaSweep(j.sb, j.k, 0, 128, step)
				mu.Lock()
				bad, exact, pairs = bad+b, exact+e, pairs+2*129*int64((1<<23+step-1)/step)
				if b != 0 {
					t.Errorf("scales in [2^%d, 2^%d), x in [2^%d, 2^%d): %d pairs round differently through the corrected multiply", j.sb, j.sb+1, j.k, j.k+1, b)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	t.Logf("%d pairs (every %d-th scale significand, %d binade pairs): %d E4M3 bytes differ; %d float32 quotients equal the division's (the rest: float32 subnormal quotients, E4M3 zeros either way)",
		pairs, step, len(jobs), bad, exact)
}
