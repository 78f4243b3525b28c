package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// TestCTwoJobs runs testdata/link.c as two jobs of separate mpiruns: a
// 2-rank trainer (m2n_session_listen) and, once its port file exists, a
// 2-rank generator (m2n_session_connect, after a refused connect to a
// missing port file); two steps, every element checked on the generator.
func TestCTwoJobs(t *testing.T) {
	bin, err := compileC(t, "link", t.TempDir())
	if err != nil {
		t.Fatal(err) // no mpicc included: the two-job test does not skip
	}
	uri := mpitest.OmpiServer(t)
	port := filepath.Join(t.TempDir(), "trainer.port")
	start := func(role string) (*exec.Cmd, *bytes.Buffer) {
		return mpitest.StartCommand(t, uri, 2, 90*time.Second, bin, role, port)
	}
	trainer, tout := start("listen")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(port); err == nil {
			break
		}
		if time.Now().After(deadline) {
			trainer.Process.Kill()
			trainer.Wait()
			t.Fatalf("no port file after 30s:\n%s", tout)
		}
	}
	gen, gout := start("connect")
	gerr, terr := gen.Wait(), trainer.Wait()
	if gerr != nil || !strings.Contains(gout.String(), "link connect: passed") {
		t.Errorf("generator job: %v\n%s", gerr, gout)
	}
	if terr != nil || !strings.Contains(tout.String(), "link listen: passed") {
		t.Errorf("trainer job: %v\n%s", terr, tout)
	}
	t.Logf("trainer:\n%s\ngenerator:\n%s", tout, gout)
}

// TestPythonTwoJobs runs python/tests/test_link.py as two jobs:
// m2n.Session.listen on a 2-rank trainer, m2n.Session.connect on a 2-rank
// generator; it skips, as the other Python tests do, where the
// interpreter lacks mpi4py or numpy.
func TestPythonTwoJobs(t *testing.T) {
	py := python(t)
	so := library(t)
	uri := mpitest.OmpiServer(t)
	port := filepath.Join(t.TempDir(), "trainer.port")
	pkg, err := filepath.Abs("../python")
	if err != nil {
		t.Fatal(err)
	}
	start := func(role string) (*exec.Cmd, *bytes.Buffer) {
		c, err := mpitest.Command(2, py, filepath.Join("..", "python", "tests", "test_link.py"), role, port)
		if err != nil {
			t.Fatal(err)
		}
		c.Args = mpitest.JobArgs(c.Args, uri)
		c.Env = append(c.Env, "M2N_LIBRARY="+so, "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(2*time.Minute, func() { _ = c.Process.Kill() })
		return c, &out
	}
	trainer, tout := start("listen")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(port); err == nil {
			break
		}
		if time.Now().After(deadline) {
			trainer.Process.Kill()
			trainer.Wait()
			t.Fatalf("no port file after 60s:\n%s", tout)
		}
	}
	gen, gout := start("connect")
	gerr, terr := gen.Wait(), trainer.Wait()
	if gerr != nil || !strings.Contains(gout.String(), "test_link.py: 2 ranks, passed") {
		t.Errorf("generator job: %v\n%s", gerr, gout)
	}
	if terr != nil || !strings.Contains(tout.String(), "test_link.py: 2 ranks, passed") {
		t.Errorf("trainer job: %v\n%s", terr, tout)
	}
	t.Logf("trainer:\n%s\ngenerator:\n%s", tout, gout)
}
