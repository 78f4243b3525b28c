package fp8

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
)

func TestReciprocal(t *testing.T) {
	if Reciprocal != float32(1.0/448) || math.Float32bits(Reciprocal) != 0x3B124925 {
		t.Fatalf("Reciprocal = %v (%#x), want float32(1/448) = 0x3B124925", Reciprocal, math.Float32bits(Reciprocal))
	}
	// The rule's point: a multiply by the rounded reciprocal is not a true
	// division for every amax.
	differ := 0
	for u := uint32(0x0080); u < 0x7F80; u++ {
		a := bf16(uint16(u))
		if ScaleOf(a) != a/448 {
			differ++
		}
	}
	if differ == 0 {
		t.Error("amax*float32(1/448) equals amax/448 for every bfloat16 amax; the rule says they differ")
	}
	t.Logf("%d of %d normal bfloat16 amaxes scale differently by amax*r and amax/448", differ, 0x7F80-0x80)
	if ScaleOf(0) != 1 {
		t.Errorf("ScaleOf(0) = %v, want 1", ScaleOf(0))
	}
}

// TestEncodeAgainstReference compares Encode with the nearest-value search
// on every float32 whose top 20 bits take every value and whose low 12 bits
// are one of the patterns that matter for rounding (exact, just above and
// below a half, all ones): every exact midpoint, every value one ulp
// either side of one, both signs, zeros, subnormals, infinities and NaNs.
func TestEncodeAgainstReference(t *testing.T) {
	lows := []uint32{0, 1, 0x7FF, 0x800, 0x801, 0xFFF}
	step := uint32(1)
	if testing.Short() {
		step = 7
	}
	n := 0
	for hi := uint32(0); hi < 1<<20; hi += step {
		for _, lo := range lows {
			u := hi<<12 | lo
			f := math.Float32frombits(u)
			got, want := Encode(f), refEncode(float64(f))
			if got != want {
				t.Fatalf("Encode(%g = %#08x) = %#02x, reference %#02x", f, u, got, want)
			}
			n++
		}
	}
	// Around the limits: 448 is the largest value, 464 the midpoint to
	// the next (480, which E4M3FN spends on NaN), and beyond.
	for _, c := range []float32{448, 464, 480, 496, 512, 1e30, float32(math.Inf(1))} {
		for d := -3; d <= 3; d++ {
			f := math.Float32frombits(uint32(int32(math.Float32bits(c)) + int32(d)))
			for _, s := range []float32{1, -1} {
				if got, want := Encode(s*f), refEncode(float64(s*f)); got != want || got&0x7F != 0x7E && f >= 448 {
					t.Errorf("Encode(%g) = %#02x, want %#02x", s*f, got, want)
				}
			}
		}
	}
	if Encode(float32(math.NaN())) != NaN || Encode(-float32(math.NaN())) != NaN {
		t.Error("NaN does not encode to 0x7F")
	}
	t.Logf("%d float32 values encoded as the reference does", n)
}

func TestDecode(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		v := Decode(b)
		if b&0x7F == 0x7F {
			if !math.IsNaN(float64(v)) {
				t.Errorf("Decode(%#02x) = %v, want NaN", b, v)
			}
			continue
		}
		if Encode(v) != b {
			t.Errorf("Encode(Decode(%#02x) = %v) = %#02x", b, v, Encode(v))
		}
		if float64(v) != math.Copysign(refValues[c&0x7F], float64(v)) {
			t.Errorf("Decode(%#02x) = %v, reference %v", b, v, refValues[c&0x7F])
		}
	}
	if Decode(0x7E) != Max || Decode(0x01) != 0x1p-9 || Decode(0x08) != 0x1p-6 {
		t.Error("Decode of 448, the smallest subnormal or the smallest normal is wrong")
	}
}

// testScales returns scales from amaxes across the whole bfloat16 range:
// every power of two, the limits, and random ones.
func testScales(r *rand.Rand, n int) []float32 {
	var s []float32
	for e := -133; e <= 127; e++ {
		a := float32(math.Ldexp(1, e))
		s = append(s, ScaleOf(a), ScaleOf(a*1.5), ScaleOf(a*1.9921875))
	}
	for _, u := range []uint16{0x0001, 0x0002, 0x007F, 0x0080, 0x0081, 0x7F7F, 0x7F7E, 0x43E0, 0x43E8, 0x43F0} {
		s = append(s, ScaleOf(bf16(u)))
	}
	for range n {
		s = append(s, ScaleOf(bf16(uint16(1+r.IntN(0x7F7F)))))
	}
	return s
}

// TestQuantizeMulExhaustive checks that the float64 reciprocal multiply
// gives the true float32 division's bytes: every bfloat16 x against
// hundreds of scales, and random float32 pairs (x within the block's
// amax, as the rule makes it, and anywhere).
func TestQuantizeMulExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	scales := testScales(r, 200)
	if testing.Short() {
		scales = scales[:len(scales)/8]
	}
	for _, s := range scales {
		inv := 1 / float64(s)
		for u := 0; u < 1<<16; u++ {
			x := bf16(uint16(u))
			if math.IsNaN(float64(x)) {
				continue
			}
			if got, want := quantizeMul(x, inv), QuantizeValue(x, s); got != want {
				t.Fatalf("x %g (%#04x), s %g: multiply %#02x, division %#02x", x, u, s, got, want)
			}
		}
	}
	n := 2_000_000
	if testing.Short() {
		n = 100_000
	}
	for range n {
		amax := math.Float32frombits(r.Uint32() & 0x7F7FFFFF)
		x := amax * float32(r.Float64()*2-1)
		if r.IntN(2) == 0 {
			x = math.Float32frombits(r.Uint32() & 0xFF7FFFFF)
		}
		s := ScaleOf(amax)
		if got, want := quantizeMul(x, 1/float64(s)), QuantizeValue(x, s); got != want {
			t.Fatalf("x %g, s %g: multiply %#02x, division %#02x", x, s, got, want)
		}
		if got, want := QuantizeValue(x, s), refQuant(float64(x), float64(s)); got != want {
			t.Fatalf("x %g, s %g: QuantizeValue %#02x, reference %#02x", x, s, got, want)
		}
	}
}

// TestTable checks the bfloat16 tables, and the loop that reads them, for
// every bfloat16 value (in and out of the table's range, NaN and Inf
// included) against QuantizeValue.
func TestTable(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	src := make([]byte, 2<<16)
	for u := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*u:], uint16(u))
	}
	dst := make([]byte, 1<<16)
	var tab [tableCap]byte
	scales := testScales(r, 50)
	if testing.Short() {
		scales = scales[:len(scales)/8]
	}
	tabled := 0
	for _, s := range scales {
		if !tableable(s) {
			continue
		}
		tabled++
		base := buildTable(&tab, s)
		bad := quantBF16Table(dst, src, &tab, base, 1/float64(s))
		if bad != 0x7F80 {
			t.Errorf("s %g: first non-finite at %#x, want 0x7F80", s, bad)
		}
		for u := range 1 << 16 {
			x := bf16(uint16(u))
			if math.IsNaN(float64(x)) {
				if dst[u] != NaN {
					t.Fatalf("s %g: NaN %#04x gave %#02x", s, u, dst[u])
				}
				continue
			}
			if want := QuantizeValue(x, s); dst[u] != want {
				t.Fatalf("s %g (table base %#x): x %g (%#04x) gave %#02x, want %#02x", s, base, x, u, dst[u], want)
			}
		}
	}
	if tabled < len(scales)/2 {
		t.Errorf("only %d of %d scales suit a table", tabled, len(scales))
	}
}

// TestTinyFloat32Amax: a float32 block whose amax is below about 2^-141
// gets the scale 0, as in torch: its nonzero elements divide to infinity
// and clamp to 448, its zeros divide to NaN.
func TestTinyFloat32Amax(t *testing.T) {
	src := make([]byte, 12)
	binary.LittleEndian.PutUint32(src, 1)              // 2^-149
	binary.LittleEndian.PutUint32(src[4:], 0x80000003) // -3 * 2^-149
	q, err := Quantize(dtype.F32, []int64{1, 3}, Tensor, src)
	if err != nil {
		t.Fatal(err)
	}
	if q.Scales[0] != 0 || q.Data[0] != 0x7E || q.Data[1] != 0xFE || q.Data[2] != NaN {
		t.Errorf("scale %v, bytes %#02x, want scale 0 and 7e fe 7f", q.Scales[0], q.Data)
	}
}
