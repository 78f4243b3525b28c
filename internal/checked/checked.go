// Package checked is arithmetic on sizes that reports overflow instead of
// wrapping: shapes, offsets, byte counts, chunk and staging sizes all go
// through it wherever they multiply or add, so that an input too large for
// int64 is an error naming the value rather than a negative size.
package checked

import (
	"math"
	"math/bits"
)

// Mul returns a*b and whether it fits in an int64.
func Mul(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	neg := (a < 0) != (b < 0)
	ua, ub := abs(a), abs(b)
	hi, lo := bits.Mul64(ua, ub)
	if hi != 0 {
		return 0, false
	}
	if neg {
		if lo > 1<<63 {
			return 0, false
		}
		return -int64(lo-1) - 1, true
	}
	if lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// Add returns a+b and whether it fits in an int64.
func Add(a, b int64) (int64, bool) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, false
	}
	return c, true
}

// Product returns the product of xs (1 for none) and whether it fits.
func Product(xs ...int64) (int64, bool) {
	p := int64(1)
	for _, x := range xs {
		var ok bool
		if p, ok = Mul(p, x); !ok {
			return 0, false
		}
	}
	return p, true
}

func abs(a int64) uint64 {
	if a < 0 {
		return uint64(-(a + 1)) + 1
	}
	return uint64(a)
}

// SatMul multiplies non-negative sizes, saturating at math.MaxInt64
// instead of reporting overflow: for bounds that only need to be "too
// large" (a report, a comparison against a limit).
func SatMul(a, b int64) int64 {
	if p, ok := Mul(a, b); ok {
		return p
	}
	return math.MaxInt64
}

// SatSum adds non-negative sizes (negative ones count as 0), saturating at
// math.MaxInt64.
func SatSum(xs ...int64) int64 {
	var t int64
	for _, x := range xs {
		var ok bool
		if t, ok = Add(t, max(x, 0)); !ok {
			return math.MaxInt64
		}
	}
	return t
}
