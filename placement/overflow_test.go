package placement

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
)

// chunkBig is torch.chunk in exact arithmetic, the oracle for Chunk.
func chunkBig(lo, hi, k, r int64) (int64, int64) {
	n := new(big.Int).Sub(big.NewInt(hi), big.NewInt(lo))
	K := big.NewInt(k)
	c := new(big.Int).Add(n, new(big.Int).Sub(K, big.NewInt(1)))
	c.Quo(c, K)
	start := new(big.Int).Mul(big.NewInt(r), c)
	if start.Cmp(n) >= 0 {
		return hi, hi
	}
	end := new(big.Int).Add(start, c)
	if end.Cmp(n) > 0 {
		end.Set(n)
	}
	L := big.NewInt(lo)
	return new(big.Int).Add(L, start).Int64(), new(big.Int).Add(L, end).Int64()
}

// TestChunkNoOverflow is issue 17 case 8: Chunk formed n+k-1, which wraps
// for lengths near math.MaxInt64 and gave negative local shapes. Chunk now
// matches exact arithmetic on every length that fits.
func TestChunkNoOverflow(t *testing.T) {
	lengths := []int64{0, 1, 2, 7, 1 << 62, math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64 / 3}
	ks := []int64{1, 2, 3, 4, 7, 1 << 20, math.MaxInt64 / 2, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		lengths = append(lengths, rng.Int64())
		ks = append(ks, 1+rng.Int64N(1<<40))
	}
	for _, n := range lengths {
		for _, k := range ks {
			rs := []int64{0, 1, k / 2, k - 2, k - 1}
			for _, r := range rs {
				if r < 0 || r >= k {
					continue
				}
				for _, lo := range []int64{0, 5, math.MaxInt64 - n} {
					if lo < 0 || lo > math.MaxInt64-n {
						continue
					}
					iv, err := Chunk(Interval{lo, lo + n}, k, r)
					if err != nil {
						t.Fatalf("Chunk([%d,%d), %d, %d): %v", lo, lo+n, k, r, err)
					}
					wlo, whi := chunkBig(lo, lo+n, k, r)
					if iv.Lo != wlo || iv.Hi != whi {
						t.Fatalf("Chunk([%d,%d), %d, %d) = %v, want [%d:%d)", lo, lo+n, k, r, iv, wlo, whi)
					}
				}
			}
		}
	}
}

// TestChunkRejects is issue 17 case 12: Chunk(iv, 0, 0) divided by zero.
func TestChunkRejects(t *testing.T) {
	tests := []struct {
		iv   Interval
		k, r int64
		want string
	}{
		{Interval{0, 10}, 0, 0, "into 0 parts"},
		{Interval{0, 10}, -3, 0, "into -3 parts"},
		{Interval{0, 10}, 4, 4, "part 4 of 4 parts"},
		{Interval{0, 10}, 4, -1, "part -1 of 4 parts"},
		{Interval{10, 0}, 4, 0, "[10:0) runs backwards"},
		{Interval{math.MinInt64, math.MaxInt64}, 4, 0, "longer than an int64"},
	}
	for _, tc := range tests {
		_, err := Chunk(tc.iv, tc.k, tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Chunk(%v, %d, %d) = %v, want an error containing %q", tc.iv, tc.k, tc.r, err, tc.want)
		}
	}
}

// TestHugeShape is issue 17 case 8: 0x9223372036854775807 on 2 ranks S1.
// Its dim 1 no longer wraps (the parts are exact), and because a row of
// it spans more bytes than an int64 holds, NewLayout refuses it naming the
// span; shapes whose bytes overflow are refused likewise.
func TestHugeShape(t *testing.T) {
	m, _ := mesh.Interval([]int{2}, 0)
	parts := nestedChunks(math.MaxInt64, []int{0}, m)
	if parts[0] != (Interval{0, 1 << 62}) || parts[1] != (Interval{1 << 62, math.MaxInt64}) {
		t.Fatalf("parts of MaxInt64 over 2: %v", parts)
	}
	tests := []struct {
		shape []int64
		dt    dtype.DType
		want  string
	}{
		{[]int64{0, math.MaxInt64}, dtype.F32, "shape 0x9223372036854775807 of f32 is too large: it spans 36893488147419103228 bytes"},
		{[]int64{0, math.MaxInt64}, dtype.U8, ""}, // 1-byte elements: it fits exactly
		{[]int64{1 << 62}, dtype.F32, "spans 18446744073709551616 bytes"},
		{[]int64{1 << 60}, dtype.F32, ""},
		{[]int64{1 << 61}, dtype.F32, "spans 9223372036854775808 bytes"},
		{[]int64{1 << 61, 2}, dtype.F32, "spans 18446744073709551616 bytes"},
		{[]int64{65536, 65536, 64}, dtype.F32, ""}, // 1 TiB fits in an int64; memory is the caller's check
		{[]int64{99999999999, 99999999999}, dtype.U8, "spans 9999999999800000000001 bytes"},
	}
	for _, tc := range tests {
		ps := []Placement{Shard(len(tc.shape) - 1)}
		l, err := NewLayout(tc.shape, tc.dt, m, ps)
		if tc.want == "" {
			if err != nil {
				t.Errorf("NewLayout(%v, %v): %v", tc.shape, tc.dt, err)
				continue
			}
			for r := 0; r < 2; r++ {
				sh, off := l.LocalShapeOffset([]int{r})
				for d := range sh {
					if sh[d] < 0 || off[d] < 0 {
						t.Errorf("%v rank %d: shape %v offset %v", tc.shape, r, sh, off)
					}
				}
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLayout(%v, %v) = %v, want an error containing %q", tc.shape, tc.dt, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"99999999999x99999999999":  "spans 9999999999800000000001 elements",
		"0x9223372036854775807x2":  "spans 18446744073709551614 elements",
		"9223372036854775808":      "not an integer",
		"0x9223372036854775807":    "",
		"3037000499x3037000499":    "",
		"3037000500x3037000500x1":  "spans 9223372037000250000 elements",
		"1x1x1x1x0x0x0x4294967296": "",
	} {
		_, err := ParseShape(in)
		if want == "" {
			if err != nil {
				t.Errorf("ParseShape(%q): %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseShape(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// TestBoxElemsChecked: counts that overflow are reported, never wrapped.
func TestBoxElemsChecked(t *testing.T) {
	b := Box{Lo: []int64{0, 0}, Hi: []int64{1 << 32, 1 << 32}}
	if _, err := b.CheckedElems(); err == nil {
		t.Error("2^64 elements fit?")
	}
	if b.Elems() != math.MaxInt64 {
		t.Errorf("Elems of an overflowing box = %d, want saturation", b.Elems())
	}
	if n := (Box{Lo: []int64{math.MinInt64}, Hi: []int64{math.MaxInt64}}).Elems(); n != math.MaxInt64 {
		t.Errorf("Elems of a 2^64-long box = %d", n)
	}
	if n := (Box{Lo: []int64{5, 0}, Hi: []int64{3, 4}}).Elems(); n != 0 {
		t.Errorf("Elems of a backwards box = %d, want 0", n)
	}
	if _, err := (Box{Lo: []int64{0}, Hi: []int64{1, 2}}).CheckedElems(); err == nil {
		t.Error("mismatched bounds accepted")
	}
	if n, err := (Box{Lo: []int64{2, 0}, Hi: []int64{5, 7}}).CheckedElems(); err != nil || n != 21 {
		t.Errorf("CheckedElems = %d, %v", n, err)
	}
	v := DenseView([]int64{2, math.MaxInt64, 2}, 0)
	if v.Strides[0] != math.MaxInt64 {
		t.Errorf("DenseView strides %v: want the overflowing stride saturated", v.Strides)
	}
	if _, err := v.Extent([]int64{2, math.MaxInt64, 2}); err == nil {
		t.Error("Extent of an overflowing view accepted")
	}
}

// TestViewSpanOverflow: strides whose span overflows are an error, not a
// wrapped span that hides an overlap.
func TestViewSpanOverflow(t *testing.T) {
	v := View{Strides: []int64{math.MaxInt64 - 1, 1}}
	if err := v.Validate([]int64{2, 2}); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("overflowing strides: %v", err)
	}
	if _, err := v.Extent([]int64{2, 2}); err == nil {
		t.Error("Extent one past math.MaxInt64 accepted")
	}
}

// TestSplitBadBoxes: boxes Split cannot cut come back whole
// instead of indexing out of range, and long dims cut exactly.
func TestSplitBadBoxes(t *testing.T) {
	for _, b := range []Box{
		{Lo: []int64{0, 3}, Hi: []int64{4, 3}},
		{Lo: []int64{0, 0}, Hi: []int64{4}},
		{Lo: []int64{5}, Hi: []int64{2}},
	} {
		if got := b.Split(4); len(got) != 1 {
			t.Errorf("%v.Split(4) = %v", b, got)
		}
	}
	b := Box{Lo: []int64{0}, Hi: []int64{math.MaxInt64}}
	parts := b.Split(3)
	if len(parts) != 3 || parts[0].Lo[0] != 0 || parts[2].Hi[0] != math.MaxInt64 || parts[1].Lo[0] != math.MaxInt64/3 {
		t.Errorf("[0, MaxInt64).Split(3) = %v", parts)
	}
}
