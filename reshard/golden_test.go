package reshard

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/goldentest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/ with the current output")

// TestGoldenPlans renders the paper's examples; a change in a plan shows up
// as a diff of testdata/*.txt in review. Run with -rewrite to accept one.
func TestGoldenPlans(t *testing.T) {
	tests := []struct {
		file           string
		shape, dtype   string
		srcMesh, srcPl string
		dstMesh, dstPl string
		world          int
		opts           Options
	}{
		// Example A: each destination TP slot consolidates two adjacent source
		// shards, and DP=2 replication duplicates that ownership.
		{"example_a.txt", "8x4", "f32", "4", "S0", "2x2", "R,S0", 8, Options{}},
		// The same source to TP-sharded columns: every box is strided on the
		// destination side.
		{"example_a_columns.txt", "16x8", "bf16", "4", "S0", "2x2", "R,S1", 8, Options{}},
		// EP-sharded experts to TP over the middle dim, striped over a
		// replicated source.
		{"experts_striped.txt", "4x8x6", "bf16", "2x2", "S0,R", "2x2", "R,S1", 8, Options{StripeReplicas: true}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			src := layout(t, tc.shape, tc.dtype, tc.srcMesh, tc.srcPl, nil)
			dst := layout(t, tc.shape, tc.dtype, tc.dstMesh, tc.dstPl, seq(src.Mesh().Size(), 4))
			p, err := NewPlan(src, dst, tc.world, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkPlan(p); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteTable(&got, 0); err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, filepath.Join("testdata", tc.file), got.Bytes(), *rewrite, "plan", "./reshard")
		})
	}
}
