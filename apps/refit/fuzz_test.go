package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/faults"
)

// FuzzRunConfig launches whole `refit run` jobs (at most 8 ranks) of
// configurations decoded from the fuzzer's bytes: random layouts (shapes,
// dtypes, meshes, placements, rank lists, valid and not), options (routes,
// chunk and staging sizes, coalescing, striping, verify, atomic, domains,
// emulated rates, iterations), environment (the same settings as
// variables, M2N_MPI_INPLACE), MPMD launches where one rank differs, and
// now and then a fault (a rank stopped at some point, a corrupted byte).
// Each job must end within its bound with either a passed check on every
// route, or exactly one message that names a flag, a variable or a rank,
// and no trace: a hang, a panic trace, a wrong check, a valid
// configuration refused, an invalid one accepted, or messages from two
// ranks is a failure. The seeds run in `make test` (a few seconds); `make
// fuzz` explores, and what it finds lands in testdata/fuzz/FuzzRunConfig,
// which `go test` replays from then on.
func FuzzRunConfig(f *testing.F) { fuzzJobs(f, fuzzSeeds, decodeConfig) }

// fuzzJobs seeds f with seeds' bytes and launches, for every input, the job
// decode makes of it, then judges its output.
func fuzzJobs(f *testing.F, seeds []uint64, decode func([]byte) runConfig) {
	for _, seed := range seeds {
		f.Add(seedBytes(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := decode(data)
		t.Logf("configuration: %s", c)
		c.judge(t, launch(t, c.bound(), c.env, c.apps()...))
	})
}

// fuzzSeeds are the seeds of the configurations `go test` runs, chosen
// from TestFuzzSeedsList's listing: a valid job on two routes with 7-byte
// chunks, an MPMD launch that disagrees, a byte corrupted on rank 0 that
// the check must catch, M2N_MPI_INPLACE=banana, and a valid job with
// 7-byte chunks and --verify.
var fuzzSeeds = []uint64{1, 2, 9, 16, 17}

// seedBytes is the fuzzer's input for seed: 64 pseudo-random bytes.
func seedBytes(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 17))
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// bytesIn hands out choices from the fuzzer's bytes, 0 once they run out.
type bytesIn struct {
	b []byte
	i int
}

// pick returns a choice in [0, n); 0 is the plain choice (a default, an
// option left off), so that short inputs make plain jobs.
func (r *bytesIn) pick(n int) int {
	if r.i >= len(r.b) || n <= 1 {
		r.i++
		return 0
	}
	v := int(r.b[r.i]) % n
	r.i++
	return v
}

// rare returns true for about one byte value in n (never once the bytes
// run out).
func (r *bytesIn) rare(n int) bool {
	if r.i >= len(r.b) {
		r.i++
		return false
	}
	return r.pick(256)%n == n-1
}

// runConfig is one decoded job.
type runConfig struct {
	world     int
	args      []string // every rank's flags
	env       []string // every rank's environment
	oddArgs   []string // the last rank's extra flags (an MPMD launch), if any
	oddEnv    []string // the last rank's extra environment
	timeout   time.Duration
	bad       []string // what was made invalid on purpose: the names the message should carry
	stopRank  int      // the rank M2N_FAULT_STOP stops, -1 if none
	corrupt   int      // the rank M2N_FAULT_CORRUPT corrupts, -1 if none
	layoutErr error    // the layouts' own verdict, as the CLI parses them
	needWorld int      // the ranks the layouts need
	corrupts  bool     // the corrupted rank holds bytes to corrupt
}

func (c runConfig) String() string {
	s := fmt.Sprintf("np %d: refit %s", c.world, strings.Join(c.args, " "))
	if len(c.env) > 0 {
		s = strings.Join(c.env, " ") + " " + s
	}
	if c.oddArgs != nil || c.oddEnv != nil {
		s += fmt.Sprintf("; last rank also %s %s", strings.Join(c.oddEnv, " "), strings.Join(c.oddArgs, " "))
	}
	return s
}

// bound is the job's liveness bound: every wait is bounded by the
// timeout, and a job of at most 8 ranks and a few thousand elements makes
// a few dozen of them, each quick unless a rank is stopped.
func (c runConfig) bound() time.Duration { return 90 * time.Second }

func (c runConfig) apps() []app {
	if c.oddArgs == nil && c.oddEnv == nil {
		return []app{{np: c.world, args: c.args}}
	}
	return []app{{np: c.world - 1, args: c.args}, {np: 1, env: c.oddEnv, args: append(slices.Clone(c.args), c.oddArgs...)}}
}

// decodeConfig turns bytes into a job.
func decodeConfig(data []byte) runConfig {
	r := &bytesIn{b: data}
	c := runConfig{stopRank: -1, corrupt: -1, timeout: 10 * time.Second}
	var pf pairFlags
	// the tensor: 1 to 3 dims of small sizes, at most a few thousand
	// elements, so that 1-byte chunks stay quick.
	dims := []int{4, 8, 1, 0, 3, 5, 7, 16, 2, 12, 31, 64}
	nd := 1 + r.pick(3)
	shape := make([]string, nd)
	elems := 1
	for i := range shape {
		d := dims[r.pick(len(dims))]
		for elems*max(d, 1) > 4096 {
			d /= 2
		}
		elems *= max(d, 1)
		shape[i] = fmt.Sprint(d)
	}
	pf.Shape = strings.Join(shape, "x")
	switch {
	case r.rare(24):
		pf.Shape, c.bad = "99999999999x99999999999", append(c.bad, "--shape")
	case r.rare(24):
		pf.Shape, c.bad = "8x-4", append(c.bad, "--shape")
	}
	dtypes := []string{"f32", "bf16", "f64", "u8", "i32", "f16", "i8", "i64", "fp8e4m3", "fp8e5m2"}
	pf.DType = dtypes[r.pick(len(dtypes))]
	if r.rare(24) {
		pf.DType, c.bad = "q4", append(c.bad, "--dtype")
	}
	meshes := []string{"2", "1", "4", "2x2", "3", "1x2", "2x1"}
	placements := func(mesh string) string {
		axes := strings.Count(mesh, "x") + 1
		pl := make([]string, axes)
		for i := range pl {
			if k := r.pick(nd + 1); k == nd {
				pl[i] = "R"
			} else {
				pl[i] = fmt.Sprintf("S%d", k)
			}
		}
		if r.rare(32) {
			pl[0] = fmt.Sprintf("S%d", nd) // out of range: the layouts refuse it
		}
		return strings.Join(pl, ",")
	}
	pf.Src.Mesh = meshes[r.pick(len(meshes))]
	pf.Src.Placements = placements(pf.Src.Mesh)
	pf.Dst.Mesh = meshes[r.pick(len(meshes))]
	pf.Dst.Placements = placements(pf.Dst.Mesh)
	size := func(m string) int {
		n := 1
		for _, a := range strings.Split(m, "x") {
			var k int
			fmt.Sscan(a, &k)
			n *= k
		}
		return n
	}
	// explicit rank lists now and then: a permutation of 0-7, the
	// destinations overlapping the sources or not.
	if r.pick(3) == 1 {
		perm := []int{0, 1, 2, 3, 4, 5, 6, 7}
		for i := len(perm) - 1; i > 0; i-- {
			j := r.pick(i + 1)
			perm[i], perm[j] = perm[j], perm[i]
		}
		ns, nd := size(pf.Src.Mesh), size(pf.Dst.Mesh)
		pf.Src.Ranks = ranksList(perm[:ns])
		off := ns
		if r.pick(2) == 1 {
			off = r.pick(ns + 1) // overlap
		}
		if off+nd > len(perm) {
			off = len(perm) - nd
		}
		pf.Dst.Ranks = ranksList(perm[off : off+nd])
	}
	_, dst, world, err := pf.layouts()
	c.layoutErr, c.needWorld = err, world
	c.world = max(world, 1)
	switch {
	case world == 0:
		c.world = 2
	case r.rare(16) && world > 1:
		c.world = world - 1 // too few ranks
	case r.pick(4) == 1 && world < 8:
		c.world = world + 1 // an idle rank
	}
	args := []string{"run", "--shape", pf.Shape, "--dtype", pf.DType, "--src-mesh", pf.Src.Mesh, "--src-placements", pf.Src.Placements,
		"--dst-mesh", pf.Dst.Mesh, "--dst-placements", pf.Dst.Placements, "--check"}
	if pf.Src.Ranks != "" {
		args = append(args, "--src-ranks", pf.Src.Ranks, "--dst-ranks", pf.Dst.Ranks)
	}
	routes := []string{"flat", "all", "hier", "agbcast", "auto", "flat,hier"}
	args = append(args, "--route", routes[r.pick(len(routes))])
	if r.rare(32) {
		args, c.bad = append(args, "--route", "ring"), append(c.bad, "--route")
	}
	args = append(args, "--iters", fmt.Sprint(1+r.pick(2)), "--warmup", fmt.Sprint(r.pick(2)))
	if r.rare(32) {
		args, c.bad = append(args, "--warmup", "-1"), append(c.bad, "--warmup")
	}
	// chunk and staging, by flag or by variable.
	chunks := []int{0, 1, 7, 40, 256, 4096}
	if ch := chunks[r.pick(len(chunks))]; ch > 0 {
		staging, byFlag := 8*ch, r.pick(2) == 1
		if r.rare(16) {
			staging--
			c.bad = append(c.bad, map[bool]string{true: "--staging-bytes", false: "M2N_STAGING_BYTES"}[byFlag])
		}
		if byFlag {
			args = append(args, "--chunk-bytes", fmt.Sprint(ch), "--staging-bytes", fmt.Sprint(staging))
		} else {
			c.env = append(c.env, fmt.Sprintf("M2N_CHUNK_BYTES=%d", ch), fmt.Sprintf("M2N_STAGING_BYTES=%d", staging))
		}
	}
	switch r.pick(4) {
	case 1:
		args = append(args, "--coalesce-bytes", "0")
	case 2:
		args = append(args, "--coalesce-bytes", "64")
	}
	for _, fl := range []string{"--stripe", "--verify", "--atomic", "--json"} {
		if r.pick(3) == 1 {
			args = append(args, fl)
		}
	}
	domains := r.pick(5)
	switch domains {
	case 1:
		args = append(args, "--dst-domain-size", "1")
	case 2:
		args = append(args, "--dst-domain-size", "2", "--src-domain-size", "1")
	case 3:
		c.env = append(c.env, "M2N_DST_DOMAIN_SIZE=2")
	}
	emulate := r.pick(6)
	switch emulate {
	case 1:
		args = append(args, "--emulate-net-bw", "1GB/s", "--dst-domain-size", "1")
		domains = 1
	case 2:
		args = append(args, "--balance", "bytes")
	}
	if r.rare(32) && domains != 1 && domains != 2 { // the flag would take precedence
		c.env, c.bad = append(c.env, "M2N_DST_DOMAIN_SIZE=2 junk"), append(c.bad, "M2N_DST_DOMAIN_SIZE")
	}
	if r.rare(32) && emulate != 1 {
		c.env, c.bad = append(c.env, "M2N_EMULATE_NET_BW=1e-300"), append(c.bad, "M2N_EMULATE_NET_BW")
	}
	switch r.pick(4) {
	case 1:
		c.env = append(c.env, "M2N_MPI_INPLACE=0")
	case 2:
		c.env = append(c.env, "M2N_MPI_INPLACE=1")
	}
	if r.rare(32) {
		c.env, c.bad = append(c.env, "M2N_MPI_INPLACE=banana"), append(c.bad, "M2N_MPI_INPLACE")
	}
	// one rank started differently (an MPMD launch): every rank must fail
	// naming it.
	switch {
	case c.world < 2:
	case r.rare(12):
		c.oddArgs = []string{"--iters", "3"}
	case r.rare(12):
		c.oddEnv = []string{"M2N_COALESCE_BYTES=0"}
	}
	// a fault: a rank stopped at some point, or a byte corrupted.
	switch {
	case r.rare(12) && c.world > 1:
		c.stopRank = r.pick(c.world)
		c.timeout = 3 * time.Second
		c.env = append(c.env, fmt.Sprintf("M2N_FAULT_STOP=%d:%s", c.stopRank, faults.Points[r.pick(len(faults.Points))]))
	case r.rare(12) && err == nil:
		ranks := dst.Mesh().Ranks()
		c.corrupt = ranks[r.pick(len(ranks))]
		c.corrupts = dst.LocalBytes(c.corrupt) > 0
		c.env = append(c.env, fmt.Sprintf("M2N_FAULT_CORRUPT=%d:0", c.corrupt))
	}
	c.args = append(args, "--timeout", c.timeout.String())
	return c
}

func ranksList(rs []int) string {
	s := make([]string, len(rs))
	for i, x := range rs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// valid reports whether the configuration should run and pass its check.
func (c runConfig) valid() bool {
	return len(c.bad) == 0 && c.layoutErr == nil && c.world >= c.needWorld && c.oddArgs == nil && c.oddEnv == nil &&
		c.stopRank < 0 && !c.corrupts
}

// judge checks how the job ended against the configuration.
func (c runConfig) judge(t *testing.T, o outcome) {
	t.Helper()
	noCrash(t, o)
	msgs := messages(o)
	if c.valid() {
		if o.code != 0 {
			t.Fatalf("a valid configuration failed: %s\n%v", c, o)
		}
		if strings.Contains(o.stdout, "FAILED") || !strings.Contains(o.stdout, "passed") {
			t.Fatalf("a wrong check: %s\n%v", c, o)
		}
		if len(msgs) > 0 {
			t.Errorf("messages from a job that passed: %q", msgs)
		}
		return
	}
	if o.code == 0 {
		if c.stopRank >= 0 && len(c.bad) == 0 && c.layoutErr == nil && c.world >= c.needWorld && c.oddArgs == nil && c.oddEnv == nil {
			// a stop at a point the job never reaches (the layouts leave
			// the rank out of a step, say) lets it pass: the check must
			// then be right.
			if strings.Contains(o.stdout, "passed") && !strings.Contains(o.stdout, "FAILED") {
				return
			}
		}
		t.Fatalf("an invalid or faulty configuration passed: %s (made bad: %v, layouts: %v, world %d of %d)\n%v", c, c.bad, c.layoutErr, c.world, c.needWorld, o)
	}
	if c.world < c.needWorld && c.layoutErr == nil && len(msgs) == 0 && strings.Contains(o.stderr, "not enough slots") {
		return // mpirun itself refused (more ranks than it may start)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want exactly one: %s\n%s\n%v", len(msgs), c, strings.Join(msgs, "\n"), o)
	}
	m := msgs[0]
	if !strings.Contains(m, "--") && !strings.Contains(m, "M2N_") && !strings.Contains(m, "rank") && !strings.Contains(m, "mpirun -np") {
		t.Errorf("the message names no flag, variable or rank: %q (%s)", m, c)
	}
	if len(c.bad) == 1 && c.layoutErr == nil && c.oddArgs == nil && c.oddEnv == nil && c.stopRank < 0 &&
		!strings.Contains(m, c.bad[0]) && !strings.Contains(m, "disagree") {
		t.Errorf("the message does not name %s, the one thing made bad: %q (%s)", c.bad[0], m, c)
	}
	if c.stopRank >= 0 && len(c.bad) == 0 && c.layoutErr == nil && c.oddArgs == nil && c.oddEnv == nil && c.world >= c.needWorld &&
		!strings.Contains(m, fmt.Sprintf("[%d]", c.stopRank)) && !strings.Contains(m, "MPI_Finalize") && !strings.Contains(m, "did not finish") {
		t.Errorf("rank %d was stopped; the message does not name it: %q (%s)", c.stopRank, m, c)
	}
}

// TestFuzzSeedsList prints the configurations of seeds 1 to
// M2N_FUZZ_LIST, to choose fuzzSeeds from.
func TestFuzzSeedsList(t *testing.T) {
	listSeeds(t, "configurations", func(seed uint64) string {
		c := decodeConfig(seedBytes(seed))
		return fmt.Sprintf("valid %v, bad %v, layouts %v, stop %d, corrupt %d: %s", c.valid(), c.bad, c.layoutErr, c.stopRank, c.corrupt, c)
	})
}

// listSeeds logs describe(seed) for seeds 1 to M2N_FUZZ_LIST (the
// configurations a fuzzer's seeds decode to, to choose its seeds from);
// without M2N_FUZZ_LIST it skips.
func listSeeds(t *testing.T, what string, describe func(seed uint64) string) {
	t.Helper()
	n := 0
	fmt.Sscan(os.Getenv("M2N_FUZZ_LIST"), &n)
	if n == 0 {
		t.Skipf("set M2N_FUZZ_LIST=N to list the %s of seeds 1 to N", what)
	}
	for seed := 1; seed <= n; seed++ {
		t.Logf("seed %d: %s", seed, describe(uint64(seed)))
	}
}

// TestRunConfigSweep is the seeded generator beside the fuzzer: with
// M2N_FUZZ_SWEEP=A-B it launches the configurations of seeds A to B, one
// subtest each, and writes each seed that fails into
// testdata/fuzz/FuzzRunConfig (as the fuzzer writes what it finds), where
// every `go test` replays it.
func TestRunConfigSweep(t *testing.T) {
	var from, to uint64
	if _, err := fmt.Sscanf(os.Getenv("M2N_FUZZ_SWEEP"), "%d-%d", &from, &to); err != nil {
		t.Skip("set M2N_FUZZ_SWEEP=A-B to launch the configurations of seeds A to B")
	}
	failed := 0
	for seed := from; seed <= to; seed++ {
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := decodeConfig(seedBytes(seed))
			t.Logf("configuration: %s", c)
			c.judge(t, launch(t, c.bound(), c.env, c.apps()...))
		})
		if !ok {
			failed++
			keepCorpus(t, fmt.Sprintf("sweep-%d", seed), seedBytes(seed))
		}
	}
	t.Logf("%d configurations, %d failed", to-from+1, failed)
}

// keepCorpus writes data as a corpus entry of FuzzRunConfig.
func keepCorpus(t *testing.T, name string, data []byte) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRunConfig")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
