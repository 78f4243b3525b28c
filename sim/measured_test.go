package sim_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/sim"
)

// TestUseMeasured: a config takes an emulated run's chunking, routes and
// cluster (in place, coalescing at 64 KiB), except the settings the caller
// keeps; a run that did not emulate leaves the cluster alone.
func TestUseMeasured(t *testing.T) {
	const run = `{"world": 4, "domains": [0, 0, 1, 1], "chunk_bytes": 1048576, "staging_bytes": 8388608, "emulated_net_bw": 5e7,
		"fabric": {"LocalBW": 1e9, "Latency": 2e-5}, "routes": [{"route": "flat", "median_s": 0.1}, {"route": "hier", "median_s": 0.2}]}`
	m, err := sim.ReadMeasured(strings.NewReader(run))
	if err != nil {
		t.Fatal(err)
	}
	preset, _ := sim.Preset("hgx-h200")
	c := sim.Config{Cluster: preset, Routes: []string{"agbcast"}, CoalesceBytes: 1 << 20}
	if err := c.UseMeasured(m, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if c.Measured != m || c.Schedule.ChunkBytes != 1<<20 || c.Schedule.StagingBytes != 8<<20 || !slices.Equal(c.Routes, []string{"flat", "hier"}) {
		t.Errorf("took chunk %d, staging %d, routes %v", c.Schedule.ChunkBytes, c.Schedule.StagingBytes, c.Routes)
	}
	if c.Cluster.Name != "emulated" || c.Cluster.NetBW != 5e7 || c.Cluster.DomainGPUs != 2 || !c.InPlace || c.CoalesceBytes != 64<<10 {
		t.Errorf("took cluster %v, in place %v, coalesce %d", c.Cluster, c.InPlace, c.CoalesceBytes)
	}
	kept := sim.Config{Cluster: preset, Routes: []string{"agbcast"}, CoalesceBytes: 1 << 20}
	keep := func(s string) bool { return s == "route" || s == "coalesce-bytes" || s == "in-place" }
	if err := kept.UseMeasured(m, keep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kept.Routes, []string{"agbcast"}) || kept.InPlace || kept.CoalesceBytes != 1<<20 || kept.Cluster.Name != "emulated" {
		t.Errorf("kept routes %v, in place %v, coalesce %d, cluster %s", kept.Routes, kept.InPlace, kept.CoalesceBytes, kept.Cluster.Name)
	}
	plain, err := sim.ReadMeasured(strings.NewReader(strings.Replace(run, `"emulated_net_bw": 5e7`, `"emulated_net_bw": 0`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	c = sim.Config{Cluster: preset}
	if err := c.UseMeasured(plain, func(string) bool { return false }); err != nil || c.Cluster != preset || c.InPlace {
		t.Errorf("a run that did not emulate: cluster %v, in place %v, %v", c.Cluster, c.InPlace, err)
	}
}

// TestClusterSet: Set takes ParseCluster's keys and spellings, and a bad
// value's error names the key and wraps the parse error.
func TestClusterSet(t *testing.T) {
	c, _ := sim.Preset("gb200-nvl72")
	for _, kv := range [][2]string{{"net", "400Gbps"}, {"local", "1TB/s"}, {"net-latency", "5us"}, {"copy", "free"}, {"gpus", "4"}} {
		if err := c.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
	}
	if c.NetBW != 50e9 || c.LocalBW != 1e12 || c.NetLatency != 5e-6 || c.CopyBW != 0 || c.DomainGPUs != 4 {
		t.Errorf("after Set: %v", c)
	}
	err := c.Set("net", "fast")
	if err == nil || !strings.Contains(err.Error(), "net=fast") || errors.Unwrap(err) == nil {
		t.Errorf("Set(net, fast) = %v, want an error naming net=fast and wrapping the cause", err)
	}
	if err := c.Set("colour", "1"); err == nil || !strings.Contains(err.Error(), strconv.Quote("colour")) {
		t.Errorf("Set(colour) = %v, want an unknown key", err)
	}
}
