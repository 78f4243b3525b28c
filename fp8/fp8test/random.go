package fp8test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
)

// Spread shapes the values Random draws: normal values scaled by 2^e,
// where e is drawn once in [-Exp, Exp) and rises by one every Period
// elements, over Levels steps, so that blocks get different scales. With
// Specials, about one element in 50 each is +0, -0 or a bf16 subnormal.
type Spread struct {
	Exp, Period, Levels int
	Specials            bool
}

// Random returns the raw little-endian elements (bf16 or f32) of a dense
// tensor of shape, drawn from r as s says. It panics on another dtype or
// a shape whose bytes overflow an int64.
func Random(r *rand.Rand, dt dtype.DType, shape []int64, s Spread) []byte {
	if dt != dtype.BF16 && dt != dtype.F32 {
		panic(fmt.Sprintf("fp8test: Random of %v", dt))
	}
	n, ok := checked.Product(shape...)
	size, ok2 := checked.Mul(n, int64(dt.Size()))
	if !ok || !ok2 {
		panic(fmt.Sprintf("fp8test: Random: shape %v overflows", shape))
	}
	out := make([]byte, size)
	e := r.IntN(2*s.Exp) - s.Exp
	for i := range n {
		v := float32(r.NormFloat64() * math.Ldexp(1, e+int(i/int64(s.Period)%int64(s.Levels))))
		if s.Specials {
			switch r.IntN(50) {
			case 0:
				v = 0
			case 1:
				v = float32(math.Copysign(0, -1))
			case 2:
				v = math.Float32frombits(uint32(1+r.IntN(200)) << 16) // a bf16 subnormal
			}
		}
		if dt == dtype.BF16 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(math.Float32bits(v)>>16))
		} else {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	}
	return out
}
