package main

import (
	"slices"
	"testing"
)

// TestQuantBenchFlags: quant-bench takes row widths of 256 B to 64 KiB
// that divide --bytes, and --peer auto or off; anything else is a usage
// error naming the flag, before any GPU is touched.
func TestQuantBenchFlags(t *testing.T) {
	got, err := parseRowWidths("256, 1KiB,4KiB,16KiB,64KiB", 1<<30)
	if err != nil || !slices.Equal(got, []int{256, 1 << 10, 4 << 10, 16 << 10, 64 << 10}) {
		t.Errorf("parseRowWidths: %v, %v", got, err)
	}
	for _, tc := range []struct{ flag, value, want string }{
		{"--rows", "128", `--rows "128": row width 128: want an even number of bytes from 256 B to 64 KiB`},
		{"--rows", "128KiB", `--rows "128KiB"`},
		{"--rows", "258", `--rows "258"`}, // does not divide 1 GiB
		{"--rows", "", `--rows ""`},
		{"--peer", "on", `--peer "on": want auto or off`},
		{"--bytes", "100", `--bytes "100"`},
	} {
		wantUsageError(t, tc.want, "quant-bench", tc.flag, tc.value)
	}
}
