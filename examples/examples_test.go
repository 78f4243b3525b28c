// Package examples runs the example programs under mpirun as part of the
// test suite: each is built, launched with its rank count, and must exit
// 0 and print its success line (every element it received checked).
package examples

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

func TestExamples(t *testing.T) {
	for _, ex := range []struct {
		name string
		np   int
		args []string
		want string
	}{
		{"trainer", 8, nil, "3 steps of 6 tensors checked on every generator rank"},
		{"stages", 5, nil, "3 steps: the generator holds both stages' layers, checked"},
		{"model", 8, []string{"../model/testdata/models/qwen3-235b-a22b.config.json"}, "3 steps of the whole model checked on every generator rank"},
		{"gpu", 1, nil, "3 steps on 1 GPU(s), S0 -> S1, and 2 launched after a trainer's event, checked (replay driver)"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			mpitest.Require(t)
			bin := filepath.Join(t.TempDir(), ex.name)
			if out, err := exec.Command("go", "build", "-o", bin, "./"+ex.name).CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			cmd, err := mpitest.Command(ex.np, append([]string{bin}, ex.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
				for _, line := range strings.Split(string(out), "\n") {
					if _, why, found := strings.Cut(line, "skip: "); found {
						t.Skip(why)
					}
				}
			}
			if err != nil || !strings.Contains(string(out), ex.want) {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestTwoJobs runs the twojobs example as three jobs of separate mpiruns:
// a 2-rank trainer serving two generators; a 1-rank generator killed
// after 3 checked steps (the trainer's next wait fails, its job goes
// on); a 2-rank generator that joins next, 3 steps checked, and leaves.
func TestTwoJobs(t *testing.T) {
	mpitest.Require(t)
	bin := filepath.Join(t.TempDir(), "twojobs")
	if out, err := exec.Command("go", "build", "-o", bin, "./twojobs").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	uri := mpitest.OmpiServer(t)
	port := filepath.Join(t.TempDir(), "trainer.port")
	job := func(np int, args ...string) (*exec.Cmd, *bytes.Buffer) {
		return mpitest.StartCommand(t, uri, np, 2*time.Minute, append([]string{bin}, args...)...)
	}
	waitFor := func(what string) {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(port); err == nil && strings.Contains(string(b), what) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the port file never said %s", what)
			}
		}
	}
	trainer, tout := job(2, "trainer", port, "2")
	waitFor(`"state":"accepting"`)
	g1, g1out := job(1, "generator", port, "3", "kill")
	if err := g1.Wait(); err == nil || !strings.Contains(g1out.String(), "3 steps of the whole model checked") {
		t.Fatalf("the killed generator: %v\n%s", err, g1out)
	}
	waitFor(`"state":"accepting"`)
	g2, g2out := job(2, "generator", port, "3")
	if err := g2.Wait(); err != nil || !strings.Contains(g2out.String(), "3 steps of the whole model checked") {
		t.Errorf("the second generator: %v\n%s", err, g2out)
	}
	err := trainer.Wait()
	out := tout.String()
	for _, want := range []string{"generator 1 (1 ranks) joined in", "; 3 steps; it failed: ", "waiting for ranks [2]",
		"generator 2 (2 ranks) joined in", "; 3 steps; it left", "served 2 generators"} {
		if !strings.Contains(out, want) {
			t.Errorf("the trainer's output lacks %q", want)
		}
	}
	if err != nil || t.Failed() {
		t.Fatalf("trainer: %v\n%s", err, out)
	}
	t.Logf("trainer:\n%s\ngenerator 1:\n%s\ngenerator 2:\n%s", out, g1out, g2out)
}
