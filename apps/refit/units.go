package main

import (
	"fmt"

	"math"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/m2n-dev/m2n/internal/units"
)

func getenv(k string) string { return strings.TrimSpace(os.Getenv(k)) }

// byteUnits are the suffixes parseBytes knows: decimal (kB, MB, GB, TB) and
// binary (KiB, MiB, GiB, TiB), matched without regard to case except that
// the binary ones need their "i".
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// parseBytes parses a byte count such as "16MiB", "7168MB", "1.5GiB" or
// "4096". MB and GB are decimal; MiB and GiB binary; a bare K, M or G is
// binary.
func parseBytes(s string) (int64, error) {
	v, err := parseScaled(s, byteUnits)
	if err != nil {
		return 0, err
	}
	if v < 0 || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("byte count %s out of range", s)
	}
	return int64(math.Round(v)), nil
}

// parseRate parses a bandwidth such as "50GB/s" or "900 GB/s" into bytes
// per second.
func parseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(t)
	switch {
	case strings.HasSuffix(low, "/s"):
		t = t[:len(t)-2]
	case strings.HasSuffix(low, "ps"):
		t = t[:len(t)-2]
	}
	v, err := parseScaled(t, byteUnits)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q: want a rate like 50GB/s", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("bandwidth %q must be positive", s)
	}
	return v, nil
}

func parseScaled(s string, units []struct {
	suffix string
	mult   float64
}) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size like 16MiB or 7168MB", s)
	}
	return v * mult, nil
}

// formatBytes renders a byte count with a binary unit.
func formatBytes(n int64) string {
	f := float64(n)
	for _, u := range []struct {
		name string
		mult float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if math.Abs(f) >= u.mult {
			return fmt.Sprintf("%.4g %s", f/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// formatSeconds renders a duration given in seconds (units.Seconds).
func formatSeconds(s float64) string { return units.Seconds(s) }

// int64Bytes views a slice of int64 as its bytes (for MPI collectives).
func int64Bytes(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)
}

// formatRate renders bytes per second with a decimal unit, as bandwidths
// are quoted: "50 GB/s".
func formatRate(bps float64) string {
	for _, u := range []struct {
		name string
		mult float64
	}{{"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"kB/s", 1e3}} {
		if bps >= u.mult {
			return fmt.Sprintf("%.4g %s", bps/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%.4g B/s", bps)
}
