// Package examples runs the example programs under mpirun as part of the
// test suite: each is built, launched with its rank count, and must exit
// 0 and print its success line (every element it received checked).
package examples

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
