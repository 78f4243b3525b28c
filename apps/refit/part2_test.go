package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestUnitsEverywhere is issue 26.3's units: one spelling is one value in
// every command: 400Gbps is 50 GB/s (the paper's NDR NIC) for refit bound
// and refit sim alike, and 50Gbps is 6.25 GB/s (the CLI read it as
// 50 GB/s, the simulator refused it).
func TestUnitsEverywhere(t *testing.T) {
	out, err := runRefit(t, "bound", "--bytes", "7168MB", "--sources", "16", "--dst-shards", "8", "--rho", "2", "--net-bw", "400Gbps")
	if err != nil || !strings.Contains(out, "hier     8.96 ms") || !strings.Contains(out, "BN = 50 GB/s") {
		t.Errorf("bound at 400Gbps: %v\n%s", err, out)
	}
	out, err = runRefit(t, "sim", "--shape", "64x64", "--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "2",
		"--dst-placements", "S1", "--net-bw", "50Gbps", "--route", "flat", "--json")
	var rep struct {
		Cluster struct {
			NetBW float64 `json:"net_bw"`
		} `json:"cluster"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Cluster.NetBW != 6.25e9 {
		t.Errorf("sim at 50Gbps: %v, net_bw %g\n%s", err, rep.Cluster.NetBW, out)
	}
}
