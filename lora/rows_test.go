package lora

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddRowsAVX2MatchesScalar compares the AVX2 rows with the scalar
// loop bit for bit over lengths that exercise the 32-, 8- and 1-element
// paths, 1 to 40 rows, and values from tiny to huge, signed zeros,
// infinities and NaNs (whose bits may differ only as quiet NaNs do).
func TestAddRowsAVX2MatchesScalar(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: addRows is the scalar loop alone")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	val := func() float32 {
		switch rng.IntN(40) {
		case 0:
			return float32(math.Inf(1 - 2*rng.IntN(2)))
		case 1:
			return float32(math.NaN())
		case 2:
			return float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
		}
		return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(80)-40)))
	}
	for trial := 0; trial < 3000; trial++ {
		n, r := rng.IntN(100), 1+rng.IntN(40)
		stride := n + rng.IntN(5)
		acc, alpha, a := make([]float32, n), make([]float32, r), make([]float32, r*stride+n)
		for i := range acc {
			acc[i] = val()
		}
		for i := range alpha {
			alpha[i] = val()
		}
		for i := range a {
			a[i] = val()
		}
		want := append([]float32(nil), acc...)
		addRowsScalar(want, alpha, a, stride)
		addRows(acc, alpha, a, stride)
		for j := range acc {
			g, w := acc[j], want[j]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("n %d, r %d, element %d: %v (%#x), scalar %v (%#x)", n, r, j, g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
	}
}

// BenchmarkMerge merges rank-16 adapters into one rank's 1024 x 4096 bf16
// weight part, the previous step's product taken away (32 rows a row),
// and reports ns per weight element.
func BenchmarkMerge(b *testing.B) {
	for _, avx := range []bool{true, false} {
		if avx && !useAVX2 {
			continue
		}
		b.Run(map[bool]string{true: "avx2", false: "scalar"}[avx], func(b *testing.B) {
			was := useAVX2
			setAVX2(avx)
			defer setAVX2(was)
			const rows, cols, r = 1024, 4096, 16
			wl, al, bl := layout2(rows, cols), layout2(r, cols), layout2(rows, r)
			w, a, bb := benchInputs(rows, cols, r)
			mg := NewMerger()
			op := func(l layoutT, buf []byte) Matrix { return Matrix{Layout: l, Rank: 0, Buf: buf} }
			_ = mg.Merge("w", op(wl, w), op(al, a), op(bl, bb), 0.5)
			b.ResetTimer()
			for range b.N {
				_ = mg.Merge("w", op(wl, w), op(al, a), op(bl, bb), 0.5)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(rows*cols), "ns/elem")
		})
	}
}

// benchInputs returns the merge benchmarks' bf16 inputs: a rows x cols
// weight and rank-r adapters A (r x cols) and B (rows x r), sin(i) scaled
// by 1 in the weight and 0.01 in the adapters: normal values, as weights
// hold (subnormals would time the CPU's microcode assists instead).
func benchInputs(rows, cols, r int) (w, a, b []byte) {
	put := func(n int, scale float64) []byte {
		buf := make([]byte, 2*n)
		for i := 0; i < len(buf); i += 2 {
			u := math.Float32bits(float32(scale * math.Sin(float64(i))))
			buf[i], buf[i+1] = byte(u>>16), byte(u>>24)
		}
		return buf
	}
	return put(rows*cols, 1), put(r*cols, 0.01), put(rows*r, 0.01)
}
