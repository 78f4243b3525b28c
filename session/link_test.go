package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

const portFileEnv = "M2N_TEST_PORT_FILE"

// linkSpecs are the tensors of the two-job tests, in joined ranks: a
// 2-rank trainer (ranks 0, 1) to a 1-rank generator (rank 2). rows
// changes one shape, for a generator whose model disagrees.
func linkSpecs(t testing.TB, rows string) []refit.Spec {
	return []refit.Spec{
		{Name: "w", Src: layout(t, rows+"x16", 4, []int{2}, 0, "S0"), Dst: layout(t, rows+"x16", 4, []int{1}, 2, "R")},
		{Name: "b", Src: layout(t, "24", 2, []int{2}, 0, "R"), Dst: layout(t, "24", 2, []int{1}, 2, "R")},
	}
}

// replicaSpecs are linkSpecs for a generator of n replicas (ranks 2 to
// 2+n-1, each holding every tensor whole): a generator that grew.
func replicaSpecs(t testing.TB, n int) []refit.Spec {
	return []refit.Spec{
		{Name: "w", Src: layout(t, "20x16", 4, []int{2}, 0, "S0"), Dst: layout(t, "20x16", 4, []int{n}, 2, "R")},
		{Name: "b", Src: layout(t, "24", 2, []int{2}, 0, "R"), Dst: layout(t, "24", 2, []int{n}, 2, "R")},
	}
}

// joined fails t with err, a join's error, or runs body on the session it
// made and closes it.
func joined(t mpitest.T, s *session.Session, err error, body func(s *session.Session)) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	body(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// firstStep prepares linkSpecs(t, "20") on s and runs one step, checked,
// returning the call and this rank's buffers.
func firstStep(t mpitest.T, s *session.Session) (*refit.Call, []refit.TensorBuffers) {
	t.Helper()
	specs := linkSpecs(t, "20")
	call, err := s.Prepare(context.Background(), specs, reshard.Flat)
	if err != nil {
		t.Fatal(err)
	}
	bufs := buffers(t, s, specs)
	if _, err := call.Run(context.Background(), bufs); err != nil {
		t.Fatalf("step 0: %v", err)
	}
	check(t, s, specs, bufs)
	return call, bufs
}

// syncSteps prepares specs on s and runs three steps, checking every
// element of every destination after each.
func syncSteps(t mpitest.T, s *session.Session, specs []refit.Spec) {
	t.Helper()
	call, err := s.Prepare(context.Background(), specs, reshard.Flat)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer call.Close()
	bufs := buffers(t, s, specs)
	for step := 0; step < 3; step++ {
		if _, err := call.Run(context.Background(), bufs); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		check(t, s, specs, bufs)
	}
}

// TestTwoJobs launches a 2-rank trainer job that listens, then, one after
// another, a job that presents a wrong token (and tries a missing and a
// stale port file first), refused on both sides; a generator job that
// joins, disagrees on the model (refused at Prepare, the session usable),
// and syncs three steps, checked; and a second generator job that joins
// the same listener afterwards and syncs again.
func TestTwoJobs(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	dir := t.TempDir()
	port := filepath.Join(dir, "trainer.port")
	opts := session.Options{Timeout: 20 * time.Second}
	trainer := mpitest.StartJob(t, uri, "trainer", 2, []string{portFileEnv + "=" + port}, func(t mpitest.T, c *mpi.Comm) {
		l, err := session.Listen(c, os.Getenv(portFileEnv), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for gen := 0; gen < 2; gen++ {
			_, before := mpi.Live()
			s, err := l.Accept()
			if err != nil {
				t.Fatalf("accept %d: %v", gen, err)
			}
			// the intercommunicator and the merged one, which the
			// session uses as it is (communicators that span two jobs
			// are slow to make).
			if _, after := mpi.Live(); after-before != 2 {
				t.Errorf("joining made %d communicators, want 2", after-before)
			}
			if s.Size() != 3 || s.Rank() != c.Rank() {
				t.Errorf("joined rank %d of %d, want %d of 3", s.Rank(), s.Size(), c.Rank())
			}
			if c.Rank() == 0 {
				if b, err := os.ReadFile(os.Getenv(portFileEnv)); err != nil || !strings.Contains(string(b), `"state":"busy"`) {
					t.Errorf("port file while a generator is joined: %s (%v), want state busy", b, err)
				}
			}
			if gen == 0 {
				expectDisagree(t, s)
			}
			syncSteps(t, s, linkSpecs(t, "20"))
			// the second generator's layout is the first's: the trainer
			// re-uses the plans, schedule and program it derived then.
			if _, _, phases := s.Linked(); strings.Contains(phases, "re-used") != (gen == 1) {
				t.Errorf("generator %d: %s; want plans re-used only for the second", gen, phases)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("close %d: %v", gen, err)
			}
			if _, after := mpi.Live(); after != before {
				t.Errorf("%d communicators outlived the session", after-before)
			}
		}
	})
	generator := func(name string, disagree bool) *mpitest.Job {
		return mpitest.StartJob(t, uri, name, 1, []string{portFileEnv + "=" + port}, func(t mpitest.T, c *mpi.Comm) {
			s, err := session.Connect(c, os.Getenv(portFileEnv), opts)
			if err != nil {
				t.Fatal(err)
			}
			if s.Size() != 3 || s.Rank() != 2 {
				t.Errorf("joined rank %d of %d, want 2 of 3", s.Rank(), s.Size())
			}
			if disagree {
				expectDisagree(t, s)
			}
			syncSteps(t, s, linkSpecs(t, "20"))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if !mpitest.InChild() {
		writeBadPortFiles(t, port, dir)
	}
	intruder := mpitest.StartJob(t, uri, "intruder", 1, []string{portFileEnv + "=" + dir}, func(t mpitest.T, c *mpi.Comm) {
		d := os.Getenv(portFileEnv)
		for _, file := range []string{"missing.port", "stale.port", "shared.port", "wrong.port"} {
			want := map[string]string{"missing.port": "does not exist", "stale.port": "stale port file",
				"shared.port": "readable by others", "wrong.port": "wrong job token"}[file]
			start := time.Now()
			s, err := session.Connect(c, filepath.Join(d, file), opts)
			if err == nil {
				s.Close()
				t.Fatalf("%s: joined", file)
			}
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
				t.Errorf("%s: %v, want %q and the file", file, err, want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s: refused after %v, want promptly", file, took)
			}
			t.Logf("%s refused: %v", file, err)
		}
	})
	wait(t, intruder, "intruder")
	wait(t, generator("generator1", true), "generator1")
	wait(t, generator("generator2", false), "generator2")
	out := wait(t, trainer, "trainer")
	if mpitest.InChild() {
		return
	}
	if !strings.Contains(out, "refused a job") || !strings.Contains(out, "wrong job token") {
		t.Errorf("the trainer did not log the refused job:\n%s", out)
	}
	if _, err := os.Stat(port); err == nil {
		t.Errorf("the port file %s outlived the listener", port)
	}
}

// wait waits for a job in the parent and fails t if it failed; it returns
// the job's output. In a child it does nothing.
func wait(t *testing.T, j *mpitest.Job, name string) string {
	t.Helper()
	if mpitest.InChild() {
		return ""
	}
	out, err := j.Wait()
	if err != nil {
		t.Fatalf("%s job: %v\n%s", name, err, out)
	}
	t.Logf("%s job:\n%s", name, out)
	return out
}

// writeBadPortFiles waits for the trainer's port file and writes, in dir,
// a stale copy (its pid gone), a copy others may read, and a copy with a
// wrong token.
func writeBadPortFiles(t *testing.T, port, dir string) {
	t.Helper()
	pf := portFileOf(t, port)
	if pf["state"] != "accepting" || len(pf["token"].(string)) != 64 {
		t.Fatalf("port file %v: want state accepting and a 32-byte token", pf)
	}
	if st, err := os.Stat(port); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("port file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	write := func(name string, mode os.FileMode, edit func(map[string]any)) {
		m := maps.Clone(pf)
		edit(m)
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("stale.port", 0o600, func(m map[string]any) { m["pid"] = gone.Process.Pid })
	write("shared.port", 0o644, func(map[string]any) {})
	write("wrong.port", 0o600, func(m map[string]any) { m["token"] = strings.Repeat("0", 64) })
}

// expectDisagree prepares a call whose model differs between the jobs:
// every rank must fail, the session stays usable.
func expectDisagree(t mpitest.T, s *session.Session) {
	t.Helper()
	rows := "20"
	if s.Rank() == 2 {
		rows = "22"
	}
	_, err := s.Prepare(context.Background(), linkSpecs(t, rows), reshard.Flat)
	if err == nil {
		t.Fatal("a model that differs between the jobs was prepared")
	}
	if aborted, _ := s.Aborted(); aborted {
		t.Fatalf("the disagreement aborted the session: %v", err)
	}
	t.Logf("disagreeing model refused: %v", err)
}

// portFileOf reads the trainer's port file (the test's own parsing: the
// format is the session's).
func portFileOf(t *testing.T, path string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err == nil {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no port file at %s after 30s: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGeneratorKilled kills a 1-rank generator job between steps: the
// trainer's next step fails on both trainer ranks with an error (no
// hang), the trainer's job stays usable (MPI not marked failed), and a
// restarted generator of twice the replicas (2 ranks) joins the same
// listener and syncs, every element checked.
func TestGeneratorKilled(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	port := filepath.Join(t.TempDir(), "trainer.port")
	opts := session.Options{Timeout: 4 * time.Second}
	env := []string{portFileEnv + "=" + port}
	trainer := mpitest.StartJob(t, uri, "trainer", 2, env, func(t mpitest.T, c *mpi.Comm) {
		l, err := session.Listen(c, os.Getenv(portFileEnv), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		s, err := l.AcceptWithin(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		call, bufs := firstStep(t, s)
		start := time.Now()
		_, err = call.Run(context.Background(), bufs) // the generator is gone
		if err == nil {
			t.Fatal("a step with the generator killed succeeded")
		}
		if took := time.Since(start); took > opts.Timeout+5*time.Second {
			t.Errorf("the step failed after %v, want within the timeout %v", took, opts.Timeout)
		}
		t.Logf("step with the generator gone: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
		call.Close()
		cerr := s.Close()
		if ferr := mpi.Failed(); ferr != nil {
			t.Fatalf("the trainer's MPI is marked failed: %v (close: %v)", ferr, cerr)
		}
		s, err = l.AcceptWithin(30 * time.Second)
		if err != nil {
			t.Fatalf("accept after the generator was killed: %v", err)
		}
		if s.Size() != 4 {
			t.Fatalf("the restarted generator joined %d ranks, want 2 (4 in all)", s.Size()-2)
		}
		syncSteps(t, s, replicaSpecs(t, 2)) // prepared afresh: its first step is a full sync
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	if !mpitest.InChild() {
		portFileOf(t, port)
	}
	killed := mpitest.StartJob(t, uri, "killed", 1, env, func(t mpitest.T, c *mpi.Comm) {
		s, err := session.Connect(c, os.Getenv(portFileEnv), opts)
		if err != nil {
			t.Fatal(err)
		}
		firstStep(t, s)
		fmt.Println("generator: step 0 checked; killing this job")
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	})
	if !mpitest.InChild() {
		if out, err := killed.Wait(); err == nil || !strings.Contains(out, "step 0 checked") {
			t.Fatalf("the killed generator job: %v\n%s", err, out)
		}
		waitAccepting(t, port)
	}
	wait(t, generator(t, uri, "restarted", 2, env, opts), "restarted")
	wait(t, trainer, "trainer")
}

// generator starts a generator job of np replicas that connects and
// syncs.
func generator(t *testing.T, uri, name string, np int, env []string, opts session.Options) *mpitest.Job {
	return mpitest.StartJob(t, uri, name, np, env, func(t mpitest.T, c *mpi.Comm) {
		s, err := session.Connect(c, os.Getenv(portFileEnv), opts)
		joined(t, s, err, func(s *session.Session) { syncSteps(t, s, replicaSpecs(t, np)) })
	})
}

// waitAccepting waits until the listener's port file says it accepts.
func waitAccepting(t *testing.T, port string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(port); err == nil && strings.Contains(string(b), `"state":"accepting"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener of %s did not accept again within 30s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
