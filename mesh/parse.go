package mesh

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseShape parses a mesh shape written as axis lengths joined by 'x',
// such as "4x2" or "8". Every length must be a positive integer.
func ParseShape(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty mesh shape: want axis lengths like 4x2")
	}
	parts := strings.Split(s, "x")
	shape := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("mesh shape %q: axis %q is not an integer", s, p)
		}
		if n < 1 {
			return nil, fmt.Errorf("mesh shape %q: axis length %d, want at least 1", s, n)
		}
		shape[i] = n
	}
	if len(shape) > MaxDims {
		return nil, fmt.Errorf("mesh shape %q has %d axes, at most %d are supported", s, len(shape), MaxDims)
	}
	return shape, nil
}

// ParseRanks parses a rank list: comma-separated ranks and inclusive ranges,
// in any order, such as "0-7", "8,3,5" or "0-3,12-15". Ranks must be
// non-negative and appear once.
func ParseRanks(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty rank list: want ranks like 0-7 or 8,3,5")
	}
	var ranks []int
	seen := make([]uint64, MaxRanks/64)
	add := func(r int) error {
		if seen[r/64]&(1<<(r%64)) != 0 {
			return fmt.Errorf("rank list %q repeats rank %d", s, r)
		}
		seen[r/64] |= 1 << (r % 64)
		ranks = append(ranks, r)
		return nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("rank list %q: %q is not a non-negative rank", s, item)
		}
		if a >= MaxRanks {
			return nil, fmt.Errorf("rank list %q: rank %d is not below %d", s, a, MaxRanks)
		}
		if !isRange {
			if err := add(a); err != nil {
				return nil, err
			}
			continue
		}
		b, err := strconv.Atoi(strings.TrimSpace(hi))
		if err != nil || b < 0 {
			return nil, fmt.Errorf("rank list %q: %q is not a range like 0-7", s, item)
		}
		if b < a {
			return nil, fmt.Errorf("rank list %q: range %q runs backwards", s, item)
		}
		if b >= MaxRanks {
			return nil, fmt.Errorf("rank list %q: rank %d is not below %d", s, b, MaxRanks)
		}
		for r := a; r <= b; r++ {
			if err := add(r); err != nil {
				return nil, err
			}
		}
	}
	return ranks, nil
}
