package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/scheduletest"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/reshard"
)

// TestScaleScheduleDigests prints the SHA-256 of hier's schedule for every
// stage of the large configurations the simulator's cost is measured on
// (BenchmarkScale's DeepSeek-V3 at M2N_DIGEST_RANKS ranks, and NeMo-RL's
// DeepSeek-V3 256+256 on HGX, scripts/sim-published.sh), so that a change
// meant to make the build faster can be checked to leave the schedules
// byte-identical at scale, where the conformance digest
// (reshard's TestSchedulesUnchanged) covers small cases only. It runs
// only with M2N_DIGEST_RANKS set (a comma list of rank counts, multiples
// of 256, or "hgx"): the schedules take minutes to build.
func TestScaleScheduleDigests(t *testing.T) {
	env := os.Getenv("M2N_DIGEST_RANKS")
	if env == "" {
		t.Skip("M2N_DIGEST_RANKS not set")
	}
	m, err := model.Load("deepseek-v3", model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(env, ",") {
		f = strings.TrimSpace(f)
		var tr model.Trainer
		var gen model.Generator
		var setup Setup
		var src, dst int
		if f == "hgx" {
			tr, gen = model.Trainer{TP: 1, PP: 16, DP: 16, EP: 16}, model.Generator{TP: 32, DP: 8}
			c, _ := Preset("hgx-h200")
			setup = Setup{Cluster: c, Schedule: reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30}}
			src, dst = c.DomainGPUs, c.DomainGPUs
		} else {
			n, err := strconv.Atoi(f)
			if err != nil || n < 256 || n%256 != 0 {
				t.Fatalf("M2N_DIGEST_RANKS %q: want multiples of 256 or hgx", env)
			}
			tr, gen = model.Trainer{TP: 1, PP: 4, DP: n / 8, EP: 16}, model.Generator{TP: 8, DP: n / 16}
			c, _ := Preset("gb200-nvl72")
			setup = Setup{Cluster: c, Schedule: reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30}}
			src, dst = 64, 64
		}
		l, err := model.New(m, tr, gen)
		if err != nil {
			t.Fatal(err)
		}
		topo, err := SideDomains(tr.Ranks(), gen.Ranks(), src, dst)
		if err != nil {
			t.Fatal(err)
		}
		stages, err := ModelStages(l, topo, reshard.Options{StripeReplicas: true})
		if err != nil {
			t.Fatal(err)
		}
		all := sha256.New()
		var buildCPU float64
		for i, st := range stages {
			if len(st.Plans) == 0 {
				continue
			}
			c0 := cpuSeconds()
			s, err := schedule("hier", st, i, setup)
			buildCPU += cpuSeconds() - c0
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			scheduletest.Digest(h, s)
			sum := hex.EncodeToString(h.Sum(nil))
			fmt.Fprintf(all, "%s\n", sum)
			t.Logf("%s stage %d: %d messages, %d rounds, %s", f, i, len(s.Messages), s.Rounds, sum)
		}
		t.Logf("%s all stages: %s (scheduling: %.2f s CPU, one stage at a time)", f, hex.EncodeToString(all.Sum(nil)), buildCPU)
	}
}
