package perf_test

import (
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
)

// TestReplayOnCPU runs the replay benchmark's cases in host memory on the
// host driver (on the GPU every driver; refit/gpu's tests and
// scripts/gpu-check.sh time those): the small cases and a scaled model
// move and pass their checks, the model again into an FP8 generator (row
// scales, checked bit for bit), and every row has a time and a bound.
func TestReplayOnCPU(t *testing.T) {
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		s, err := session.Join(c, session.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		b, err := perf.NewReplay(s, perf.ReplayOptions{Iters: 20, BigIters: 2, Drivers: []refit.DriverKind{refit.DriverReplay},
			Models: []string{"llama-3.1-70b"}, Scale: 32, Layers: 1, NoExpert: true, FP8: fp8.Row})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.Describe(), "the host driver only") {
			t.Errorf("on the CPU: %s", b.Describe())
		}
		rows, err := b.Run()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 4 || !strings.Contains(rows[3].Case, "fp8 row") {
			t.Fatalf("%d rows: %+v", len(rows), rows)
		}
		for _, r := range rows {
			if r.Driver != "host" || !(r.Sec > 0) || r.Bound == "" {
				t.Errorf("%+v", r)
			}
		}
		var out strings.Builder
		if err := perf.WriteReplay(&out, rows); err != nil || !strings.Contains(out.String(), "model Llama-3.1-70B/32") {
			t.Errorf("%v\n%s", err, out.String())
		}
	})
}
