package main

import (
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// TestCDelta runs testdata/delta.c on 4 ranks: delta mode through the C
// ABI (m2n_options.delta, m2n_call_delta_report, m2n_call_resync), every
// destination element checked after every step against the updated
// matrix, a full sync first and after one rank's resync (which restores a
// destination overwritten outside the call), delta steps sending under a
// quarter of the dense bytes at 1% changed; version 2's options size read
// without delta; a CUDA session in delta mode refused at join, naming the
// field.
func TestCDelta(t *testing.T) {
	bin := cProgram(t, "delta")
	mpitest.Require(t)
	out, err := mpirunWithin(t, 90*time.Second, 4, nil, bin)
	if err != nil || !strings.Contains(out, "delta: passed") {
		t.Fatalf("delta under mpirun: %v\n%s", err, out)
	}
	t.Logf("\n%s", out)
}
