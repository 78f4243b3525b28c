package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/perf"
)

// The CLI items of issues 23 and 26, each as the issue ran it where it can
// be: a job must end with one message naming the cause, or run correctly.

// syncDSV3 is issue 23.2's sync: scaled DeepSeek-V3 on 8 ranks, two
// pipeline stages.
var syncDSV3 = []string{"sync", "--model", "deepseek-v3", "--scale", "64", "--layers", "4", "--train", "tp=1,pp=2,ep=2,dp=2",
	"--gen", "tp=2,dp=2", "--check", "--iters", "2"}

// TestSyncChecksEveryStep is 23.2: a byte flipped on the wire in the
// warm-up step (M2N_FAULT_WIRE) must fail refit sync --check, as it fails
// refit run --check, also when the generator is in FP8: every step the
// sync runs is checked, not only the last.
func TestSyncChecksEveryStep(t *testing.T) {
	for _, extra := range [][]string{nil, {"--dst-dtype", "e4m3"}} {
		t.Run(strings.Join(append([]string{"bf16"}, extra...), " "), func(t *testing.T) {
			o := launch(t, 2*time.Minute, []string{"M2N_FAULT_WIRE=5"}, app{np: 8, args: append(append([]string(nil), syncDSV3...), extra...)})
			// The byte flipped into world rank 5 reaches a generator rank's
			// elements there, or at the rank it forwards it to (hier's
			// leaders rotate over the replicas: which depends on the
			// schedule). Stage 0's communicator holds world ranks 0, 1
			// and 4-7, so generator ranks 4-7 are its ranks 2-5: 23.8's
			// check failures name world ranks, never 2 or 3.
			msg := oneMessage(t, o, 2*time.Minute, "check failed: ", "in warm-up step 0")
			if !regexp.MustCompile(`rank [4-7]: element`).MatchString(msg) {
				t.Errorf("the failure names no generator world rank (4 to 7): %s", msg)
			}
			if strings.Contains(o.stdout, "check passed") {
				t.Errorf("check passed with a byte flipped on the wire:\n%s", o.stdout)
			}
		})
	}
}

// TestStageChecksNameWorldRanks is 23.8's check failures in --pp-stages
// runs: the generator, world rank 4, is rank 2 of each stage's
// communicator, and the failure names rank 4.
func TestStageChecksNameWorldRanks(t *testing.T) {
	o := launch(t, time.Minute, []string{"M2N_FAULT_CORRUPT=4:3"}, app{np: 5, args: []string{"run", "--pp-stages", "2", "--shape", "8x6",
		"--dtype", "f32", "--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "1", "--dst-placements", "R", "--check", "--iters", "1", "--warmup", "0"}})
	msg := oneMessage(t, o, time.Minute, "check failed on route flat of stage 0: rank 4: element", "route flat of stage 1: rank 4: element")
	if strings.Contains(msg, "rank 2:") {
		t.Errorf("a stage-local rank is named: %s", msg)
	}
}

// TestAbsurdCounts is 23.5: counts whose sum overflows (or that no run
// could finish) are refused naming the flags, on every SPMD command that
// takes them, once, instead of every rank printing "slices.Min: empty
// list".
func TestAbsurdCounts(t *testing.T) {
	for _, args := range [][]string{
		runArgs("--iters", "9223372036854775807", "--warmup", "1", "--timeout", "20s"),
		{"sync", "--model", "llama-3.1-70b", "--scale", "32", "--layers", "2", "--train", "tp=1,pp=2", "--gen", "tp=2",
			"--iters", "9223372036854775807", "--warmup", "1", "--timeout", "20s"},
	} {
		t.Run(args[0], func(t *testing.T) {
			o := launch(t, 20*time.Second+margin, nil, app{np: 4, args: args})
			oneMessage(t, o, 20*time.Second+margin, "--iters 9223372036854775807 --warmup 1: want at most 1099511627776 iterations in all")
		})
	}
}

// TestProgressWhereWatched is 26 and 23.12's progress: under a launcher
// whose output goes to files (OpenMPI gives every rank's stdout a
// pseudo-terminal even then) no progress bar is drawn into them; a long
// job logs a progress line every tenth instead.
func TestProgressWhereWatched(t *testing.T) {
	o := launch(t, 2*time.Minute, nil, app{np: 4, args: []string{"sync", "--model", "llama-3.1-70b", "--scale", "32", "--layers", "2",
		"--train", "tp=1,pp=2", "--gen", "tp=2", "--iters", "2", "--check"}})
	if o.code != 0 || strings.Contains(o.stdout+o.stderr, "█") || !strings.Contains(o.stdout, "check passed") {
		t.Errorf("want a passed check and no progress bar in redirected output:\n%v", o)
	}
	o = launch(t, 5*time.Minute, nil, app{np: 2, args: []string{"run", "--shape", "8x8", "--src-mesh", "1", "--src-placements", "S0",
		"--dst-mesh", "1", "--dst-placements", "S1", "--iters", "20000", "--warmup", "0"}})
	if o.code != 0 || strings.Contains(o.stdout+o.stderr, "█") || !strings.Contains(o.stderr, `route flat: iterations: 90%`) {
		t.Errorf("want progress lines (10%% to 90%%) and no bar:\n%v", o)
	}
}

// TestSyncMemoryCheck is 23.7: refit sync compares the model's buffers,
// staging and scratch of every rank with the memory it has before
// anything is mapped, as refit run does: a 1 TiB tensor on three ranks of
// one host, and a model whose hidden size is 10^11 (petabytes per rank,
// once blamed on chunks "too small" for its schedule), fail at once with
// one message naming the rank, the need and what is available.
func TestSyncMemoryCheck(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "w1t.json")
	if err := os.WriteFile(list, []byte(`[{"name": "model.embed_tokens.weight", "shape": [1048576, 524288], "dtype": "bf16"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("../../model/testdata/models/llama-3.1-70b.config.json")
	if err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte(strings.Replace(string(cfg), `"hidden_size": 8192`, `"hidden_size": 100000000000`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"1TiB", []string{"--model", list}, `rank 0, tensor "model w1t (1 tensors)": needs 1099`},
		{"hidden1e11", []string{"--model", huge, "--layers", "1"}, `tensor "model huge (12 tensors)": needs 72`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"sync", "--train", "tp=1", "--gen", "tp=1,dp=2", "--timeout", "30s"}, tc.args...)
			o := launch(t, 30*time.Second+margin, nil, app{np: 3, args: args})
			msg := oneMessage(t, o, 30*time.Second+margin, tc.want, "of host memory: buffers", "are available (")
			if strings.Contains(msg, "chunk") {
				t.Errorf("blamed on the chunks: %s", msg)
			}
		})
	}
}

// TestStoppedForTheTimeout is 23.8's stopped rank: rank 1 stopped
// (SIGSTOP) for about exactly the timeout, then resumed, must not make
// the job blame healthy ranks or name none: time a rank was stopped is
// not time it waited, and a collective that every rank reaches late
// completes. The job passes, or fails with one message naming rank 1:
// as the rank the others waited for, or as the rank that was stopped.
func TestStoppedForTheTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	for _, stop := range []time.Duration{timeout, timeout + 300*time.Millisecond, timeout + 600*time.Millisecond} {
		t.Run(stop.String(), func(t *testing.T) {
			mark := marker(t)
			defer reap(mark)
			r := start(t, []string{mark}, app{np: 4, args: runArgs("--iters", "20000", "--check", "--timeout", timeout.String())})
			pid := rankProcess(t, mark, 1, 30*time.Second)
			time.Sleep(3 * time.Second) // past MPI_Init, into the steps
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(stop)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			o := r.wait(t, 3*time.Minute)
			noCrash(t, o)
			if o.code == 0 {
				if !strings.Contains(o.stdout, "check passed") {
					t.Errorf("exit 0 without a passed check:\n%v", o)
				}
				return
			}
			msg := oneMessage(t, o, 3*time.Minute)
			if !strings.Contains(msg, "waiting for ranks [1]") && !strings.Contains(msg, "rank 1: this process was stopped for") {
				t.Errorf("the message does not name rank 1 as the stopped one: %s", msg)
			}
		})
	}
}

// TestInterrupted is 23.8's interruption: SIGINT or SIGTERM to mpirun
// (which sends SIGTERM to every rank) ends the job saying so once, where
// it used to end in a second printing nothing; and a launcher tearing
// down a job because one rank ended (the same SIGTERM) adds no word of
// refit's to the launcher's own.
func TestInterrupted(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			mark := marker(t)
			defer reap(mark)
			r := start(t, []string{mark}, app{np: 4, args: runArgs("--iters", "1000000", "--timeout", "20s")})
			rankProcess(t, mark, 3, 30*time.Second)
			time.Sleep(time.Second)
			if err := r.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			o := r.wait(t, 30*time.Second)
			oneMessage(t, o, 30*time.Second, "interrupted (terminated, from the launcher")
		})
	}
	o := launch(t, 30*time.Second, []string{"M2N_FAULT_KILL=2:3"}, app{np: 4, args: runArgs("--iters", "100", "--timeout", "20s")})
	if msgs := messages(o); len(msgs) > 1 || strings.Contains(o.stderr, "interrupted") {
		t.Errorf("a killed rank's teardown is reported as an interruption:\n%v", o)
	}
}

// TestInitOnce is 23.8's start-up: where MPI_Init does not finish, one
// rank of the host says so, once, however many give up at the same time
// (ranks 2 to 7 share a turn: six copies of the message before); and a
// timeout shorter than start-up is refused naming it, instead of the
// launcher hint.
func TestInitOnce(t *testing.T) {
	o := launch(t, 3*time.Second+launcher.MinInitBound+margin, nil, app{np: 2, prog: "sleep", args: []string{"60"}},
		app{np: 6, args: runArgs("--timeout", "3s")})
	oneMessage(t, o, 3*time.Second+launcher.MinInitBound+margin, "MPI_Init did not finish in 3s")
	o = launch(t, time.Minute, nil, app{np: 4, args: runArgs("--timeout", "50ms")})
	oneMessage(t, o, time.Minute, `--timeout "50ms": MPI start-up alone took`, "longer than the timeout")
}

// TestCheckBoundedByProgress is 23.9's check: a destination whose fill,
// poison and check take longer than --timeout (1 GiB on one rank: 20 s
// for the job on 2 cores; 3 s, above MPI's start-up on a loaded machine)
// no longer makes the others time out waiting for it: that local work
// runs while every rank takes part in a progress collective every
// quarter of the timeout.
func TestCheckBoundedByProgress(t *testing.T) {
	o := launch(t, 3*time.Minute, nil, app{np: 3, args: []string{"run", "--shape", "32768x16384", "--dtype", "bf16", "--src-mesh", "2",
		"--src-placements", "S0", "--dst-mesh", "1", "--dst-placements", "R", "--check", "--iters", "1", "--warmup", "0", "--timeout", "3s"}})
	if o.code != 0 || !strings.Contains(o.stdout, "check passed") {
		t.Errorf("a valid job failed its bound while one rank checked:\n%v", o)
	}
}

// TestEmulationTimeout is 23.9's emulated rate: a rate at which a round
// cannot cross within the timeout is refused at once, naming the rate,
// the timeout and the busiest round, in refit run and refit sync (world
// ranks), where healthy ranks were blamed.
func TestEmulationTimeout(t *testing.T) {
	o := launch(t, 3*time.Second+margin, nil, app{np: 4, args: runArgs("--emulate-net-bw", "1kB/s", "--dst-domain-size", "1", "--timeout", "3s")})
	oneMessage(t, o, 3*time.Second+margin, `--emulate-net-bw "1kB/s": rank 0 moves 8 KiB over the network in round 0`, `--timeout "3s" bounds every round`)
	o = launch(t, 3*time.Second+margin, nil, app{np: 4, args: []string{"sync", "--model", "llama-3.1-70b", "--scale", "32", "--layers", "2",
		"--train", "tp=1,pp=2", "--gen", "tp=2", "--dst-domain-size", "1", "--emulate-net-bw", "1kB/s", "--timeout", "3s"}})
	oneMessage(t, o, 3*time.Second+margin, `--emulate-net-bw "1kB/s": rank `, `--timeout "3s" bounds every round`)
}

// TestEnvironmentNamed is 23.11: a variable that does not parse, on one
// rank or on all, is named with its value (and the rank), once; a
// session option that differs between ranks names the variable that set
// it; --driver graph on CPUs is refused once.
func TestEnvironmentNamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oneRank bool
		env     string
		args    []string
		want    string
	}{
		{"log level on one rank", true, "M2N_LOG_LEVEL=shouty", nil, `rank 3: M2N_LOG_LEVEL "shouty": want trace`},
		{"in-place on one rank", true, "M2N_MPI_INPLACE=0", nil, "rank 3 has in-place strided moves off true, rank 0 has false (ranks differing from rank 0: [3]); M2N_MPI_INPLACE sets it"},
		{"pack batch", false, "M2N_PACK_BATCH=garbage", nil, `rank 0: M2N_PACK_BATCH "garbage": want a whole number from 1 to 8`},
		{"gpu driver", false, "M2N_GPU_DRIVER=warp", nil, `rank 0: M2N_GPU_DRIVER "warp": want host, replay or graph`},
		{"memcpy min", false, "M2N_MEMCPY_MIN=lots", nil, `rank 0: M2N_MEMCPY_MIN "lots": want a whole number of bytes`},
		{"fuse streams", false, "M2N_FUSE_STREAMS=0", nil, `rank 0: M2N_FUSE_STREAMS "0": want a whole number from 1 to 8`},
		{"graph on cpu", false, "", []string{"--driver", "graph"}, `--driver "graph": the replay and graph drivers move GPU calls`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := runArgs(append([]string{"--iters", "1", "--timeout", "20s"}, tc.args...)...)
			var o outcome
			switch {
			case tc.oneRank:
				o = launch(t, 20*time.Second+margin, nil, app{np: 3, args: args}, app{np: 1, env: []string{tc.env}, args: args})
			case tc.env != "":
				o = launch(t, 20*time.Second+margin, []string{tc.env}, app{np: 4, args: args})
			default:
				o = launch(t, 20*time.Second+margin, nil, app{np: 4, args: args})
			}
			msg := oneMessage(t, o, 20*time.Second+margin, tc.want)
			if strings.HasSuffix(msg, ": ") || strings.Contains(msg, "rank 0: rank 0") {
				t.Errorf("a message with a dangling colon or a doubled rank: %q", msg)
			}
		})
	}
}

// TestSyncAutoPreparesOnce is 26.3: refit sync --route auto under an
// emulated network measures the generator's local bandwidth first and
// prepares the model once, on the fabric it measured; it used to prepare
// it twice and never close the second. Once the model is closed, every
// rank holds no more MPI communicators or requests than before it.
func TestSyncAutoPreparesOnce(t *testing.T) {
	o := launch(t, 2*time.Minute, nil, app{np: 4, args: []string{"sync", "--model", "llama-3.1-70b", "--scale", "32", "--layers", "2",
		"--train", "tp=1,pp=2", "--gen", "tp=2", "--dst-domain-size", "2", "--emulate-net-bw", "200MB/s", "--route", "auto",
		"--iters", "1", "--check", "--json"}})
	var rep perf.SyncReport
	if err := json.Unmarshal([]byte(o.stdout), &rep); err != nil || o.code != 0 {
		t.Fatalf("%v: %v", err, o)
	}
	if !strings.Contains(o.stdout, `"mpi_comms_requests_leaked"`) || rep.Check != "passed" || !(rep.Fabric.LocalBW > 0) {
		t.Fatalf("check %s, local bandwidth %g, leak accounting in the report %v", rep.Check, rep.Fabric.LocalBW,
			strings.Contains(o.stdout, `"mpi_comms_requests_leaked"`))
	}
	for _, r := range rep.Ranks {
		if r.Leaked != [2]int64{} {
			t.Errorf("rank %d holds %d more communicators and %d more requests once the model is closed", r.Rank, r.Leaked[0], r.Leaked[1])
		}
	}
}
