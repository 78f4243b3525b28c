package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// prefix is a unit prefix and its multiplier.
type prefix struct {
	name string
	mult float64
}

// prefixes, longest first: binary, then decimal (matched without regard
// to case).
var prefixes = []prefix{
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40}, {"pi", 1 << 50},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12}, {"p", 1e15},
}

// number parses a finite decimal number.
func number(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// scaled splits s into a number and a prefix of unit u (matched without
// regard to case: "MiB", "mb"), and returns their product; ok is false
// when s does not end in u with a known prefix or none.
func scaled(s, u string) (float64, bool) {
	low := strings.ToLower(s)
	if !strings.HasSuffix(low, strings.ToLower(u)) {
		return 0, false
	}
	s, low = s[:len(s)-len(u)], low[:len(low)-len(u)]
	mult := 1.0
	for _, p := range prefixes {
		if strings.HasSuffix(low, p.name) {
			s, mult = s[:len(s)-len(p.name)], p.mult
			break
		}
	}
	v, ok := number(s)
	return v * mult, ok
}

// ParseBytes reads a byte count: "4096", "16MiB", "7168MB", "1.5GiB",
// "64KiB", or with a bare binary prefix "16M" (also "16m", "1G", "64K").
// MB and GB are decimal, MiB and GiB binary; a fraction of a byte rounds.
// It fails on a negative count, and on counts over 2^62.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	v, ok := scaled(t, "b")
	if !ok {
		v, ok = bareBinary(t)
	}
	if !ok {
		return 0, fmt.Errorf("%q is not a size like 16MiB or 7168MB", s)
	}
	if v < 0 || v > 1<<62 {
		return 0, fmt.Errorf("byte count %s out of range", s)
	}
	return int64(math.Round(v)), nil
}

// bareBinary reads a number with a bare K, M, G or T (binary), or none.
func bareBinary(s string) (float64, bool) {
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, ok := number(s)
	return v * mult, ok
}

// ParseRate reads a bandwidth and returns bytes per second: bytes as
// "50GB/s", "900 GB/s", "40GiB/s", "1kB/s", "50GBps"; bits as "400Gbps",
// "400Gb/s", "400Gbit/s" (a bit is an eighth of a byte: 400Gbps is
// 5e10); a bare number is bytes per second. The b of a unit says bits
// when it is lower case, bytes when it is upper case. It fails on a rate
// that is not positive.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	v, ok := rate(t)
	if !ok {
		return 0, fmt.Errorf("bandwidth %q: want a rate like 50GB/s or 400Gbps", s)
	}
	if !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bandwidth %q: want a positive rate", s)
	}
	return v, nil
}

func rate(t string) (float64, bool) {
	for _, u := range []struct {
		suffix string
		perBit bool
	}{{"bit/s", true}, {"bits/s", true}, {"bps", true}, {"b/s", true}, {"Bps", false}, {"B/s", false}} {
		if !strings.HasSuffix(t, u.suffix) {
			continue
		}
		v, ok := number(t[:len(t)-len(u.suffix)])
		if !ok {
			head := t[:len(t)-len(u.suffix)]
			if v, ok = scaled(head+"x", "x"); !ok {
				return 0, false
			}
		}
		if u.perBit {
			v /= 8
		}
		return v, true
	}
	if strings.HasSuffix(t, "/s") { // "50G/s": bytes
		return scaled(t[:len(t)-2]+"x", "x")
	}
	return number(t)
}

// ParseSeconds reads a time as a Go duration ("5us", "1.5ms", "2m") or a
// number of seconds ("5e-6", "0"), at least 0, and returns seconds.
func ParseSeconds(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if d, err := time.ParseDuration(t); err == nil && d >= 0 {
		return d.Seconds(), nil
	}
	if v, ok := number(t); ok && v >= 0 {
		return v, nil
	}
	return 0, fmt.Errorf("time %q: want a duration like 5us or seconds like 5e-6, at least 0", s)
}

// FormatBytes renders a byte count with a binary unit and 4 significant
// digits: "16 MiB", "1.5 GiB", "512 B".
func FormatBytes(n int64) string {
	f := float64(n)
	for _, u := range []prefix{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if math.Abs(f) >= u.mult {
			return fmt.Sprintf("%.4g %s", f/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// FormatDecimalBytes renders a byte count with a decimal unit and up to
// digits significant digits: FormatDecimalBytes(7168e6, 6) is "7168 MB".
func FormatDecimalBytes(b float64, digits int) string {
	for _, u := range []prefix{{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}} {
		if b >= u.mult {
			return fmt.Sprintf("%.*g %s", digits, b/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%.0f B", b)
}

// FormatRate renders bytes per second with a decimal unit, as bandwidths
// are quoted: "50 GB/s".
func FormatRate(bps float64) string {
	for _, u := range []prefix{{"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"kB/s", 1e3}} {
		if bps >= u.mult {
			return fmt.Sprintf("%.4g %s", bps/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%.4g B/s", bps)
}

// FormatSeconds renders seconds in s, ms or us with 4 significant digits:
// "8.96 ms"; 0 is "0 s".
func FormatSeconds(s float64) string {
	switch {
	case s < 0:
		return "-" + FormatSeconds(-s)
	case s == 0:
		return "0 s"
	case s >= 1:
		return fmt.Sprintf("%.4g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.4g ms", s*1e3)
	}
	return fmt.Sprintf("%.4g us", s*1e6)
}
