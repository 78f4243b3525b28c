package units

import (
	"math"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"0", 0}, {"16MiB", 16 << 20}, {"16 MiB", 16 << 20}, {"7168MB", 7168e6}, {"1.5GiB", 3 << 29},
		{"64KiB", 64 << 10}, {"64kib", 64 << 10}, {"1kB", 1000}, {"1TB", 1e12}, {"2TiB", 2 << 40}, {"512B", 512},
		{"16M", 16 << 20}, {"16m", 16 << 20}, {"1G", 1 << 30}, {"64K", 64 << 10}, {"1e3", 1000},
	} {
		got, err := ParseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "16XB", "1e30", "NaN", "Inf", "16MiBs"} {
		if n, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", bad, n)
		}
	}
}

// TestParseRateBits is issue 26's: 50Gbps is 6.25e9 bytes per second
// (the CLI read it as 50 GB/s, the simulator refused it).
func TestParseRateBits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{
		{"50Gbps", 6.25e9}, {"400Gbps", 5e10}, {"400Gb/s", 5e10}, {"400Gbit/s", 5e10}, {"400 Gbps", 5e10}, {"100Mbps", 12.5e6},
		{"50GB/s", 5e10}, {"50GBps", 5e10}, {"900 GB/s", 9e11}, {"40GiB/s", 40 << 30}, {"1kB/s", 1e3}, {"200MB/s", 2e8},
		{"5e10", 5e10}, {"1e-300", 1e-300}, {"8b/s", 1}, {"50G/s", 5e10},
	} {
		got, err := ParseRate(c.in)
		if err != nil || math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("ParseRate(%q) = %g, %v; want %g", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "fast", "-3GB/s", "0", "0GB/s", "50XB/s", "NaN"} {
		if v, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = %g, want an error", bad, v)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseRate(%q): %v does not name the value", bad, err)
		}
	}
}

func TestParseSeconds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{"5us", 5e-6}, {"1.5ms", 1.5e-3}, {"2m", 120}, {"0", 0}, {"5e-6", 5e-6}, {"3", 3}} {
		if got, err := ParseSeconds(c.in); err != nil || math.Abs(got-c.want) > 1e-15 {
			t.Errorf("ParseSeconds(%q) = %g, %v; want %g", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "soon", "-1s", "-5e-6"} {
		if _, err := ParseSeconds(bad); err == nil {
			t.Errorf("ParseSeconds(%q): want an error", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{FormatBytes(16 << 20), "16 MiB"}, {FormatBytes(512), "512 B"}, {FormatBytes(3 << 29), "1.5 GiB"}, {FormatBytes(0), "0 B"},
		{FormatDecimalBytes(7168e6, 6), "7.168 GB"}, {FormatDecimalBytes(999, 4), "999 B"},
		{FormatRate(5e10), "50 GB/s"}, {FormatRate(6.25e9), "6.25 GB/s"}, {FormatRate(12), "12 B/s"},
		{FormatSeconds(8.96e-3), "8.96 ms"}, {FormatSeconds(1.447), "1.447 s"}, {FormatSeconds(5e-6), "5 us"},
		{FormatSeconds(0), "0 s"}, {FormatSeconds(-2e-3), "-2 ms"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestRoundTrip: what FormatRate writes, ParseRate reads back.
func TestRoundTrip(t *testing.T) {
	for _, v := range []float64{1e3, 5e10, 9e11, 6.25e9, 1.5e13} {
		got, err := ParseRate(strings.ReplaceAll(FormatRate(v), " ", ""))
		if err != nil || math.Abs(got-v) > 1e-3*v {
			t.Errorf("%g -> %q -> %g, %v", v, FormatRate(v), got, err)
		}
	}
}
