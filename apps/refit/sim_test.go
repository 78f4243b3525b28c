package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/sim"
)

// paperArgs is the paper's single layer at rho 8 on GB200, zero latency
// and free copies.
var paperArgs = []string{"sim", "--shape", "256x2000x7000", "--dtype", "bf16", "--src-mesh", "16", "--src-placements", "S0",
	"--dst-mesh", "8x8", "--dst-placements", "R,S1", "--latency", "0", "--local-latency", "0", "--copy-bw", "0",
	"--chunk-bytes", "16MiB", "--staging-bytes", "256MiB"}

func TestSimPaperLayer(t *testing.T) {
	out, err := runRefit(t, append(paperArgs, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("refit sim --json: %v\n%s", err, out)
	}
	if rep.Rho != 8 || rep.World != 80 || rep.DstDomains != 1 || len(rep.Routes) != 3 {
		t.Fatalf("rho %d, world %d, %d destination domains, %d routes: want 8, 80, 1, 3", rep.Rho, rep.World, rep.DstDomains, len(rep.Routes))
	}
	want := map[string]float64{"flat": 71.68e-3, "agbcast": 143.36e-3, "hier": 8.96e-3}
	for _, r := range rep.Routes {
		if b := want[r.Route]; r.BoundSeconds < b*(1-1e-9) || r.BoundSeconds > b*(1+1e-9) {
			t.Errorf("%s: bound %g s, want the paper's %g s", r.Route, r.BoundSeconds, b)
		}
		if r.Seconds < r.BoundSeconds || r.BindingLink == "" || r.Series == nil {
			t.Errorf("%s: simulated %g s (bound %g), binding link %q, series %v", r.Route, r.Seconds, r.BoundSeconds, r.BindingLink, r.Series != nil)
		}
	}
	if r := rep.Routes[0]; r.Ratio > 1.01 {
		t.Errorf("flat is %.3fx its bound, want within 1%%", r.Ratio)
	}
	text, err := runRefit(t, append(paperArgs, "--route", "hier,auto", "--critical", "3")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"route", "hier", "auto:hier", "8.96 ms", "critical path, last 3 steps", "source injection B/(Ns*BN)"} {
		if !strings.Contains(text, s) {
			t.Errorf("text report lacks %q:\n%s", s, text)
		}
	}
}

func TestSimErrorsNameTheFlag(t *testing.T) {
	base := []string{"sim", "--shape", "64x64", "--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "2", "--dst-placements", "S1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--route", "fast"}, `--route "fast"`},
		{[]string{"--cluster", "dgx-a100"}, `--cluster "dgx-a100"`},
		{[]string{"--cluster", "custom:gpus=8"}, "network bandwidth"},
		{[]string{"--net-bw", "-3GB/s"}, `--net-bw "-3GB/s"`},
		{[]string{"--latency", "soon"}, `--latency "soon"`},
		{[]string{"--msg-rate", "fast"}, `--msg-rate "fast"`},
		{[]string{"--topology", "torus"}, `--topology "torus"`},
		{[]string{"--cluster", "hgx-h200:topology=torus"}, `--cluster "hgx-h200:topology=torus"`},
		{[]string{"--chunk-bytes", "lots"}, `--chunk-bytes "lots"`},
		{[]string{"--staging-bytes", "1MiB"}, "staging bytes"},
		{[]string{"--balance", "even"}, `--balance "even"`},
		{[]string{"--dst-domain-size", "100"}, `--dst-domain-size "100"`},
		{[]string{"--src-placements", "S9"}, `--src-placements`},
		{[]string{"--measured", "/nonexistent/run.json"}, `--measured "/nonexistent/run.json"`},
		{[]string{"--model", "deepseek-v3"}, "not both"},
		{[]string{"sim", "--model", "deepseek-v3"}, "--model, --train and --gen"},
		{[]string{"sim", "--model", "gpt-9", "--train", "tp=1", "--gen", "tp=1"}, `--model "gpt-9"`},
		{[]string{"sim", "--model", "deepseek-v3", "--train", "tp=3,pp=4", "--gen", "tp=8"}, `--train "tp=3,pp=4"`},
	} {
		args := append(append([]string(nil), base...), c.args...)
		if c.args[0] == "sim" {
			args = c.args
		}
		_, err := runRefit(t, args...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
}

// TestSimClusterNetwork: the message rate and the rail topology reach the
// report (text and --json), the NVL8 and NVL72 presets take domains of
// their full size, and a rate low enough binds.
func TestSimClusterNetwork(t *testing.T) {
	base := []string{"sim", "--shape", "64x2000x70", "--src-mesh", "8", "--src-placements", "S0", "--dst-mesh", "2x8", "--dst-placements", "R,S1",
		"--route", "flat"}
	out, err := runRefit(t, append(base, "--cluster", "hgx-h200", "--topology", "rail")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"50M messages/s per NIC (burst 1024)", "rail-optimised network (8 rails", "network: message rate 50M/s per NIC not binding",
		"cross-rail messages relayed"} {
		if !strings.Contains(out, want) {
			t.Errorf("hgx-h200 rail report lacks %q:\n%s", want, out)
		}
	}
	js, err := runRefit(t, append(base, "--cluster", "gb200-nvl72:msg-rate=20k,msg-burst=1", "--src-domain-size", "8", "--dst-domain-size", "72", "--json", "--bins", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	n := rep.Routes[0].Network
	if rep.Cluster.MsgRate != 20e3 || n.RateDelayed == 0 || !strings.Contains(rep.Routes[0].BindingLink, "message rate") || n.Topology != "fattree" {
		t.Errorf("20k messages/s: cluster %+v, network %+v, binding %q; want the rate to bind", rep.Cluster, n, rep.Routes[0].BindingLink)
	}
	if _, err := runRefit(t, append(base, "--cluster", "gb200-nvl72", "--dst-domain-size", "72", "--src-domain-size", "8")...); err != nil {
		t.Errorf("a full NVL72 domain: %v", err)
	}
	if _, err := runRefit(t, append(base, "--cluster", "hgx-h200", "--dst-domain-size", "16")...); err == nil || !strings.Contains(err.Error(), "--dst-domain-size") {
		t.Errorf("16 GPUs in an HGX domain: %v, want an error naming --dst-domain-size", err)
	}
}

func TestSimModelForm(t *testing.T) {
	out, err := runRefit(t, "sim", "--model", "llama-3.1-70b", "--scale", "16", "--layers", "4", "--train", "tp=2,pp=2,dp=2",
		"--gen", "tp=4,dp=2", "--cluster", "hgx-h200", "--route", "hier", "--per-stage", "--per-tensor")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"model Llama-3.1-70B", "2 pipeline stages (concurrent)", "stage 0:", "stage 1:", "tensor model.embed_tokens.weight"} {
		if !strings.Contains(out, s) {
			t.Errorf("model report lacks %q:\n%s", s, out)
		}
	}
}

func TestPlotWritesPNGs(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "rho.jsonl")
	var all bytes.Buffer
	for _, rho := range []string{"2", "4"} {
		out, err := runRefit(t, "sim", "--shape", "64x2000x70", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
			"--dst-mesh", rho+"x2", "--dst-placements", "R,S1", "--json", "--bins", "16")
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(out)
	}
	if err := os.WriteFile(in, all.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"plot", "rho", "--in", in, "--paper", "--out", filepath.Join(dir, "rho.png")},
		{"plot", "links", "--in", in, "--report", "2", "--out", filepath.Join(dir, "links.png")},
		{"plot", "scale", "--in", in, "--route", "all", "--out", filepath.Join(dir, "scale.png")},
	} {
		if _, err := runRefit(t, c...); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		fh, err := os.Open(c[len(c)-1])
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil || img.Bounds().Dx() < 300 {
			t.Errorf("%s: not a PNG of a plot (%v)", c[len(c)-1], err)
		}
	}
	if _, err := runRefit(t, "plot", "models", "--in", in, "--out", filepath.Join(dir, "m.png")); err == nil || !strings.Contains(err.Error(), "not a model report") {
		t.Errorf("models from single-tensor reports: error %v", err)
	}
	if _, err := runRefit(t, "plot", "bars", "--in", in, "--out", filepath.Join(dir, "b.png")); err == nil {
		t.Errorf("an unknown plot kind was accepted")
	}
}
