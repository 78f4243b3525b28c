package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// app is one part of an mpirun launch: np ranks of refit (or of prog)
// with args, and env set for those ranks alone (through env(1), as an MPMD
// launch with ':' does).
type app struct {
	np   int
	env  []string
	prog string // "" is the refit under test
	args []string
}

// outcome is how a launch ended.
type outcome struct {
	stdout, stderr string
	code           int // exit status; -1 if killed by a signal
	elapsed        time.Duration
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", o.code, o.elapsed.Round(time.Millisecond), o.stdout, o.stderr)
}

// launchCmd builds the mpirun command of apps, with env added for every
// rank.
func launchCmd(t testing.TB, env []string, apps ...app) *exec.Cmd {
	t.Helper()
	mpitest.Require(t)
	var argv []string
	for i, a := range apps {
		if i > 0 {
			argv = append(argv, ":", "-np", fmt.Sprint(a.np))
		}
		if len(a.env) > 0 {
			argv = append(append(argv, "env"), a.env...)
		}
		prog := a.prog
		if prog == "" {
			prog = refitBin
		}
		argv = append(append(argv, prog), a.args...)
	}
	cmd, err := mpitest.Command(apps[0].np, argv...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// running is a launch in progress.
type running struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	start          time.Time
	done           chan error
}

func start(t testing.TB, env []string, apps ...app) *running {
	t.Helper()
	return startCmd(t, launchCmd(t, env, apps...))
}

// startCmd starts cmd with its output captured.
func startCmd(t testing.TB, cmd *exec.Cmd) *running {
	t.Helper()
	r := &running{cmd: cmd, done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	return r
}

// wait waits up to limit for the launch to end; past it the launch hung:
// it is killed and the test fails.
func (r *running) wait(t testing.TB, limit time.Duration) outcome {
	t.Helper()
	var err error
	select {
	case err = <-r.done:
	case <-time.After(limit - time.Since(r.start)):
		r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("the job hung: still running after %v\nstdout:\n%s\nstderr:\n%s", limit, r.stdout.String(), r.stderr.String())
	}
	o := outcome{stdout: r.stdout.String(), stderr: r.stderr.String(), elapsed: time.Since(r.start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		o.code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return o
}

// launch runs apps under mpirun within limit. A job in which mpirun itself
// crashed tearing down (launcherCrash) runs once more: that is OpenMPI's
// luck, not refit's outcome; a second crash is the outcome.
func launch(t testing.TB, limit time.Duration, env []string, apps ...app) outcome {
	t.Helper()
	o := start(t, env, apps...).wait(t, limit)
	if launcherCrash(o) {
		t.Logf("mpirun itself crashed tearing the job down (%s); running the job once more:\n%v", launcherCrashMark, o)
		o = start(t, env, apps...).wait(t, limit)
	}
	return o
}

// launcherCrashMark is in the trace OpenMPI 4.1's mpirun prints when it
// crashes in its own teardown, which it does now and then around a
// SIGSTOPped process (M2N_FAULT_STOP).
const launcherCrashMark = "PMIx_server_finalize"

// launcherCrash reports whether mpirun itself crashed tearing the job
// down.
func launcherCrash(o outcome) bool {
	return strings.Contains(o.stdout+o.stderr, launcherCrashMark)
}

// margin is the liveness allowance on top of a job's timeout: mpirun's
// start, the roll call, the grace in which ranks that gave up together
// agree on who speaks, and the launcher's teardown.
const margin = 10 * time.Second

// faultNotice matches the lines the test-only fault switches print about
// themselves ("refit: rank 5: M2N_FAULT_HANG: stopping ...").
var faultNotice = regexp.MustCompile(`M2N_FAULT_[A-Z_]+: `)

// messages returns refit's (and the session's) lines of the output,
// without the fault switches' notices.
func messages(o outcome) []string {
	var out []string
	for _, l := range strings.Split(o.stdout+"\n"+o.stderr, "\n") {
		if (strings.HasPrefix(l, "refit: ") || strings.HasPrefix(l, "m2n: ")) && !faultNotice.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// crashMarks are what a Go panic trace, a runtime fault or a crashed
// process leaves in the output.
var crashMarks = []string{"panic:", "goroutine ", "fatal error", "Segmentation fault", "SIGSEGV", "[signal "}

// noCrash fails t if the output holds a trace.
func noCrash(t testing.TB, o outcome) {
	t.Helper()
	for _, m := range crashMarks {
		if strings.Contains(o.stdout+o.stderr, m) {
			t.Errorf("the output holds %q (a trace or a crash):\n%v", m, o)
		}
	}
}

// oneMessage checks that a launch ended non-zero within limit with
// exactly one message, which contains every want (the rank, the flag or
// variable, the value), and no trace.
func oneMessage(t testing.TB, o outcome, limit time.Duration, want ...string) string {
	t.Helper()
	if o.code == 0 {
		t.Errorf("exit 0, want a failure:\n%v", o)
	}
	if o.elapsed > limit {
		t.Errorf("the job took %v, more than its bound %v", o.elapsed, limit)
	}
	noCrash(t, o)
	msgs := messages(o)
	if len(msgs) != 1 {
		t.Errorf("%d messages, want exactly one:\n%s\n%v", len(msgs), strings.Join(msgs, "\n"), o)
		if len(msgs) == 0 {
			return ""
		}
	}
	for _, w := range want {
		if !strings.Contains(msgs[0], w) {
			t.Errorf("the message lacks %q:\n%s", w, msgs[0])
		}
	}
	return msgs[0]
}

// processesWithEnv lists the processes whose environment holds every one
// of kvs.
func processesWithEnv(kvs ...string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		env := strings.Split(string(b), "\x00")
		all := true
		for _, kv := range kvs {
			found := false
			for _, e := range env {
				if e == kv {
					found = true
					break
				}
			}
			all = all && found
		}
		if all {
			var pid int
			fmt.Sscan(filepath.Base(d), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// marker is an environment entry that tells this test's processes apart
// (M2N_MPITEST variables are not agreed across ranks).
func marker(t testing.TB) string {
	return fmt.Sprintf("M2N_MPITEST_MARK=%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), time.Now().UnixNano())
}

// rankProcess waits up to limit for the refit process of rank r marked
// with mark, and returns its pid.
func rankProcess(t testing.TB, mark string, r int, limit time.Duration) int {
	t.Helper()
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if pids := processesWithEnv(mark, fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r)); len(pids) > 0 {
			for _, pid := range pids {
				if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(exe) == "refit" {
					return pid
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no refit process of rank %d appeared within %v", r, limit)
	return 0
}

// reap makes sure no process of a launch outlives it: a stopped one is
// resumed and killed.
func reap(mark string) {
	for _, pid := range processesWithEnv(mark) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
