package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/faults"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/model"
)

// FuzzSyncConfig launches whole `refit sync` jobs (at most 8 ranks) of
// configurations decoded from the fuzzer's bytes, as FuzzRunConfig does
// for `refit run`: a built-in model scaled down to CPU ranks (a few
// layers), a Megatron trainer (tp, pp, dp, cp, ep, etp) and a vLLM
// generator (tp, dp), routes, an FP8 generator, --verify and --atomic,
// chunk and staging sizes, now and then a bad value on purpose, and now
// and then a fault: a byte flipped on the wire into a generator rank
// (which --check or --verify must catch, in whichever step it lands), or
// a rank stopped. Each job must end within its bound with a passed check,
// or with exactly one message that names a flag, a variable or a rank,
// and no trace. The seeds run in `make test`; `make fuzz` explores.
func FuzzSyncConfig(f *testing.F) { fuzzJobs(f, syncFuzzSeeds, decodeSyncConfig) }

// syncFuzzSeeds are the seeds of the sync configurations `go test` runs
// (TestSyncFuzzSeedsList lists them): valid jobs of each model family on
// auto and flat, with an FP8 generator and pipeline stages, a bad trainer,
// a rank stopped before Prepare, and bytes flipped on the wire (15: with
// --verify and --atomic; 35: in the warm-up step, issue 23.2's case).
var syncFuzzSeeds = []uint64{1, 4, 6, 18, 39, 15, 35}

// decodeSyncConfig turns bytes into a sync job.
func decodeSyncConfig(data []byte) runConfig {
	r := &bytesIn{b: data}
	c := runConfig{stopRank: -1, corrupt: -1, timeout: 20 * time.Second}
	models := []struct {
		name   string
		scales []int
		moe    bool
	}{
		{"llama-3.1-70b", []int{32, 64}, false},
		{"qwen3-235b-a22b", []int{16, 32}, true},
		{"deepseek-v3", []int{64, 128}, true},
	}
	m := models[r.pick(len(models))]
	scale := m.scales[r.pick(len(m.scales))]
	layers := 2 + r.pick(3)
	one := func(n int) int { return 1 + r.pick(n) }
	tp, pp, dp := one(2), one(2), one(2)
	if tp*pp*dp == 8 {
		dp = 1 // leave room for a generator
	}
	ep := 1
	if m.moe && (tp*dp)%2 == 0 {
		ep = one(2) // Megatron folds experts over a stage's tp x cp x dp
	}
	train := fmt.Sprintf("tp=%d,pp=%d,dp=%d", tp, pp, dp)
	if ep > 1 {
		train += fmt.Sprintf(",ep=%d,etp=1", ep)
	}
	gtp, gdp := []int{1, 2, 4}[r.pick(3)], one(2)
	for tp*pp*dp+gtp*gdp > 8 && gtp*gdp > 1 { // at most 8 ranks in all
		if gdp > 1 {
			gdp = 1
		} else {
			gtp /= 2
		}
	}
	gen := fmt.Sprintf("tp=%d,dp=%d", gtp, gdp)
	switch {
	case r.rare(24):
		train, c.bad = "tp=0,pp=2", append(c.bad, "--train")
	case r.rare(24):
		gen, c.bad = "tp=2,xx=3", append(c.bad, "--gen")
	}
	args := []string{"sync", "--model", m.name, "--scale", fmt.Sprint(scale), "--layers", fmt.Sprint(layers),
		"--train", train, "--gen", gen, "--check", "--iters", fmt.Sprint(1 + r.pick(2)), "--warmup", fmt.Sprint(r.pick(2))}
	routes := []string{"auto", "flat", "hier", "agbcast"}
	args = append(args, "--route", routes[r.pick(len(routes))])
	var fp8Mode fp8.Mode
	if r.pick(4) == 1 {
		args, fp8Mode = append(args, "--dst-dtype", "e4m3"), fp8.Block
	}
	for _, fl := range []string{"--verify", "--atomic"} {
		if r.pick(3) == 1 {
			args = append(args, fl)
		}
	}
	if r.pick(3) == 1 {
		args = append(args, "--chunk-bytes", "64KiB", "--staging-bytes", "1MiB")
	}
	if r.pick(3) == 1 {
		args = append(args, "--dst-domain-size", "2")
	}
	// the layouts' own verdict, and the ranks they need
	c.layoutErr = syncLayouts(m.name, scale, layers, train, gen, fp8Mode, &c.needWorld)
	c.world = max(c.needWorld, 2)
	if r.rare(16) && c.world > 2 {
		c.world-- // too few ranks: every rank must say how many the layouts need
	}
	switch {
	case r.rare(12) && c.world > 1:
		c.stopRank = r.pick(c.world)
		c.timeout = 3 * time.Second
		c.env = append(c.env, fmt.Sprintf("M2N_FAULT_STOP=%d:%s", c.stopRank, faults.Points[r.pick(len(faults.Points))]))
	case r.rare(8) && c.layoutErr == nil:
		// a generator rank: the trainer's ranks come first
		c.corrupt = c.world - 1 - r.pick(c.world-trainerRanks(train))
		c.corrupts = true
		c.env = append(c.env, fmt.Sprintf("M2N_FAULT_WIRE=%d", c.corrupt))
	}
	c.args = append(args, "--timeout", c.timeout.String())
	return c
}

// syncLayouts lays the model out as refit sync would (an FP8 generator by
// mode, 0: none), and sets *world to the ranks it needs; the error is the
// layouts' own refusal.
func syncLayouts(name string, scale, layers int, train, gen string, mode fp8.Mode, world *int) error {
	m, err := model.Load(name, model.LoadOptions{Scale: int64(scale), Layers: layers})
	if err != nil {
		return err
	}
	tr, err := model.ParseTrainer(train)
	if err != nil {
		return err
	}
	g, err := model.ParseGenerator(gen)
	if err != nil {
		return err
	}
	l, err := model.NewQuantized(m, tr, g, mode)
	if err != nil {
		return err
	}
	*world = l.World()
	return nil
}

// trainerRanks returns the trainer ranks of a trainer string that parses.
func trainerRanks(train string) int {
	tr, err := model.ParseTrainer(train)
	if err != nil {
		return 0
	}
	return tr.Ranks()
}

// TestSyncFuzzSeedsList prints the sync configurations of seeds 1 to
// M2N_FUZZ_LIST, to choose syncFuzzSeeds from.
func TestSyncFuzzSeedsList(t *testing.T) {
	listSeeds(t, "sync configurations", func(seed uint64) string {
		c := decodeSyncConfig(seedBytes(seed))
		fault := ""
		if c.corrupts {
			fault = fmt.Sprintf(", byte flipped into rank %d", c.corrupt)
		}
		return fmt.Sprintf("valid %v, bad %v, layouts %v%s: %s", c.valid(), c.bad, c.layoutErr, fault, strings.TrimPrefix(c.String(), "np "))
	})
}
