package session_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// TestSecondGeneratorBusy starts a second generator job while a first
// one is joined and stepping: it fails at once naming the busy trainer,
// and the joined session's steps go on, every element checked.
func TestSecondGeneratorBusy(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	dir := t.TempDir()
	port, done := filepath.Join(dir, "trainer.port"), filepath.Join(dir, "done")
	env := []string{portFileEnv + "=" + port, "M2N_TEST_DONE=" + done}
	opts := session.Options{Timeout: 20 * time.Second}
	// steps runs checked steps until every rank has seen the done file.
	steps := func(t mpitest.T, s *session.Session) {
		specs := linkSpecs(t, "20")
		call, err := s.Prepare(context.Background(), specs, reshard.Flat)
		if err != nil {
			t.Fatal(err)
		}
		defer call.Close()
		bufs := buffers(t, s, specs)
		for n, deadline := 0, time.Now().Add(30*time.Second); ; n++ {
			if _, err := call.Run(context.Background(), bufs); err != nil {
				t.Fatalf("step %d: %v", n, err)
			}
			check(t, s, specs, bufs)
			seen := []byte{0}
			if _, err := os.Stat(os.Getenv("M2N_TEST_DONE")); err == nil || time.Now().After(deadline) {
				seen[0] = 1
			}
			all, err := control.Exchange(context.Background(), s.Collective(), seen)
			if err != nil {
				t.Fatal(err)
			}
			if stop := strings.Contains(string(flatten(all)), "\x01"); stop {
				t.Logf("%d steps checked", n+1)
				return
			}
		}
	}
	trainer := mpitest.StartJob(t, uri, "trainer", 2, env, func(t mpitest.T, c *mpi.Comm) {
		l, err := session.Listen(c, os.Getenv(portFileEnv), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		s, err := l.Accept()
		joined(t, s, err, func(s *session.Session) { steps(t, s) })
	})
	if !mpitest.InChild() {
		portFileOf(t, port)
	}
	first := mpitest.StartJob(t, uri, "first", 1, env, func(t mpitest.T, c *mpi.Comm) {
		s, err := session.Connect(c, os.Getenv(portFileEnv), opts)
		joined(t, s, err, func(s *session.Session) { steps(t, s) })
	})
	if !mpitest.InChild() {
		waitState(t, port, "busy")
	}
	second := mpitest.StartJob(t, uri, "second", 1, env, func(t mpitest.T, c *mpi.Comm) {
		start := time.Now()
		s, err := session.Connect(c, os.Getenv(portFileEnv), opts)
		if err == nil {
			s.Close()
			t.Fatal("a second generator joined while the first was stepping")
		}
		if !strings.Contains(err.Error(), "is busy") || !strings.Contains(err.Error(), "trainer.port") {
			t.Errorf("second generator: %v, want the busy trainer and its port file named", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("refused after %v, want at once", took)
		}
		t.Logf("second generator refused: %v", err)
	})
	out := wait(t, second, "second")
	if mpitest.InChild() {
		return
	}
	if !strings.Contains(out, "is busy") {
		t.Errorf("the second generator's job did not log its refusal:\n%s", out)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait(t, first, "first")
	wait(t, trainer, "trainer")
}

func flatten(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// waitState waits until the port file says state.
func waitState(t *testing.T, port, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(port); err == nil && strings.Contains(string(b), `"state":"`+state+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the port file %s did not say %s within 30s", port, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAcceptTimesOut: a listener that no generator joins gives up after
// its wait with one error naming the port file, removes the file, and its
// job ends (MPI_Abort at Finalize: the accept MPI cannot cancel is still
// blocked) instead of hanging.
func TestAcceptTimesOut(t *testing.T) {
	var dir string
	if !mpitest.InChild() { // the ranks inherit it
		dir = t.TempDir()
		t.Setenv(portFileEnv, filepath.Join(dir, "trainer.port"))
	}
	start := time.Now()
	out, err := mpitest.Output(t, 2, func(t mpitest.T, c *mpi.Comm) {
		l, err := session.Listen(c, os.Getenv(portFileEnv), session.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		s, err := l.AcceptWithin(time.Second)
		if err == nil {
			s.Close()
			t.Fatal("accepted with no generator")
		}
		if took := time.Since(before); took > 3*time.Second {
			t.Errorf("gave up after %v, want about 1s", took)
		}
		if !strings.Contains(err.Error(), "no generator joined") || !strings.Contains(err.Error(), "trainer.port") {
			t.Errorf("error %v, want the cause and the port file", err)
		}
		if mpi.Failed() == nil {
			t.Error("MPI is not marked failed after an accept that cannot be cancelled")
		}
		if _, err := os.Stat(os.Getenv(portFileEnv)); c.Rank() == 0 && err == nil {
			t.Error("the port file outlived the failed accept")
		}
		_ = l.Close()
		t.Logf("accept gave up: %v", err)
		os.WriteFile(os.Getenv(portFileEnv)+".checked."+string(rune('0'+c.Rank())), nil, 0o600)
	})
	if mpitest.InChild() {
		return
	}
	if err == nil {
		t.Errorf("the job exited 0; want the MPI_Abort of a failed MPI\n%s", out)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("the job took %v, want it ended promptly", el)
	}
	for r := 0; r < 2; r++ {
		if _, err := os.Stat(filepath.Join(dir, "trainer.port.checked."+string(rune('0'+r)))); err != nil {
			t.Errorf("rank %d did not finish its checks:\n%s", r, out)
		}
	}
	if strings.Contains(out, "--- FAIL") {
		t.Errorf("a rank's check failed:\n%s", out)
	}
	t.Logf("%s", out)
}
