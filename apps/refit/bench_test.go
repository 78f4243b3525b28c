package main

import (
	"encoding/json"
	"testing"
)

// TestBenchVectorBaseline runs refit bench on 8 ranks with flat and hier,
// without and with an emulated network: beside each route the report has
// the plain exchange, the vector-datatype exchange of the same boxes (which
// bench checks element by element first, so a wrong box fails the job)
// and the vector exchange between two agreements, all measured.
func TestBenchVectorBaseline(t *testing.T) {
	base := []string{"bench", "--shape", "64x256", "--dst-mesh", "2x2", "--dst-placements", "R,S1", "--route", "flat,hier",
		"--iters", "2", "--json"}
	for _, extra := range [][]string{nil, {"--src-domain-size", "4", "--dst-domain-size", "4", "--emulate-net-bw", "1GB/s"}} {
		stdout, stderr, err := mpirunRefit(t, 8, nil, append(append([]string(nil), base...), extra...)...)
		if err != nil {
			t.Fatalf("%v %v\nstdout:\n%s\nstderr:\n%s", extra, err, stdout, stderr)
		}
		var rep struct {
			Routes []struct {
				Route string `json:"route"`
				Extra struct {
					ReshardRoute string  `json:"reshard_route"`
					Plain        float64 `json:"median_s"`
					Vector       float64 `json:"vector_median_s"`
					Agreed       float64 `json:"vector_agreed_median_s"`
					Ratio        float64 `json:"reshard_over_vector_bandwidth"`
				} `json:"extra"`
			} `json:"routes"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		var beside []string
		for _, r := range rep.Routes {
			if r.Route != "plain" {
				continue
			}
			x := r.Extra
			beside = append(beside, x.ReshardRoute)
			if x.Plain <= 0 || x.Vector <= 0 || x.Agreed <= 0 || x.Ratio <= 0 {
				t.Errorf("%v: route %s: baselines plain %v, vector %v, between agreements %v, ratio %v; want all measured", extra, x.ReshardRoute, x.Plain, x.Vector, x.Agreed, x.Ratio)
			}
		}
		if len(beside) != 2 || beside[0] != "flat" || beside[1] != "hier" {
			t.Errorf("%v: baselines beside %v, want [flat hier]\n%s", extra, beside, stdout)
		}
	}
}
