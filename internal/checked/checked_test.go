package checked

import (
	"math"
	"math/big"
	"testing"
)

func TestMulAddAgainstBig(t *testing.T) {
	vals := []int64{0, 1, -1, 2, -2, 3, 1 << 31, -(1 << 31), 1<<62 - 1, 1 << 62, -(1 << 62), math.MaxInt64, math.MinInt64, math.MaxInt64 / 3, 3037000499, 3037000500, -3037000500}
	lo, hi := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	fits := func(z *big.Int) bool { return z.Cmp(lo) >= 0 && z.Cmp(hi) <= 0 }
	for _, a := range vals {
		for _, b := range vals {
			want := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			got, ok := Mul(a, b)
			if ok != fits(want) || (ok && got != want.Int64()) {
				t.Errorf("Mul(%d, %d) = %d, %v; want %v (fits %v)", a, b, got, ok, want, fits(want))
			}
			wantS := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
			gotS, okS := Add(a, b)
			if okS != fits(wantS) || (okS && gotS != wantS.Int64()) {
				t.Errorf("Add(%d, %d) = %d, %v; want %v (fits %v)", a, b, gotS, okS, wantS, fits(wantS))
			}
		}
	}
	if p, ok := Product(65536, 65536, 64, 2); !ok || p != 1<<39 {
		t.Errorf("Product = %d, %v", p, ok)
	}
	if _, ok := Product(1<<40, 1<<40); ok {
		t.Error("Product(2^40, 2^40) fits?")
	}
}
