package mpitest

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	Require(t)
	cmd, err := Command(2, "sh", "-c", "echo rank=$OMPI_COMM_WORLD_RANK")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cmd.Args, "--oversubscribe") || !slices.Contains(cmd.Args, "-np") {
		t.Errorf("Args = %q, want the default flags and -np", cmd.Args)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	for _, w := range []string{"rank=0", "rank=1"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestCommandArgs(t *testing.T) {
	t.Setenv("M2N_MPIRUN", "sh") // any program on PATH stands in for mpirun
	t.Setenv("M2N_MPIRUN_FLAGS", "--a  --b x")
	cases := []struct {
		name string
		np   int
		args []string
		want []string // Args after the program
		err  bool
	}{
		{"flags then np then program", 3, []string{"prog", "-v"}, []string{"--a", "--b", "x", "-np", "3", "prog", "-v"}, false},
		{"zero ranks", 0, []string{"prog"}, nil, true},
		{"no program", 2, nil, nil, true},
	}
	for _, tc := range cases {
		cmd, err := Command(tc.np, tc.args...)
		if (err != nil) != tc.err {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && !slices.Equal(cmd.Args[1:], tc.want) {
			t.Errorf("%s: Args = %q, want %q", tc.name, cmd.Args[1:], tc.want)
		}
	}
}

func TestEnvKeepsCallerSettings(t *testing.T) {
	t.Setenv("PMIX_MCA_gds", "ds21")
	env := Env()
	if !slices.Contains(env, "PMIX_MCA_gds=ds21") || slices.Contains(env, "PMIX_MCA_gds=hash") {
		t.Errorf("Env() overrode the caller's PMIX_MCA_gds")
	}
}

// fakeTB records what Require does with a test.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, _ ...any) {
	f.fatal = format
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, _ ...any) {
	f.skip = format
	runtime.Goexit()
}

// require runs Require(f) on its own goroutine, as Fatalf and Skipf end it.
func (f *fakeTB) require() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Require(f)
	}()
	<-done
}

func TestRequireWithoutMpirun(t *testing.T) {
	t.Setenv("M2N_MPIRUN", "/nonexistent/mpirun")
	if _, err := Mpirun(); !errors.Is(err, ErrNoMpirun) {
		t.Errorf("Mpirun() error = %v, want ErrNoMpirun", err)
	}
	if _, err := Command(2, "true"); !errors.Is(err, ErrNoMpirun) {
		t.Errorf("Command error = %v, want ErrNoMpirun", err)
	}
	cases := []struct {
		name             string
		skipEnv          string
		wantFail, wantSk bool
	}{
		{"fails by default", "", true, false},
		{"skips with M2N_SKIP_MPI=1", "1", false, true},
		{"fails with M2N_SKIP_MPI=0", "0", true, false},
	}
	for _, tc := range cases {
		t.Setenv("M2N_SKIP_MPI", tc.skipEnv)
		f := &fakeTB{}
		f.require()
		if (f.fatal != "") != tc.wantFail || (f.skip != "") != tc.wantSk {
			t.Errorf("%s: fatal %q, skip %q", tc.name, f.fatal, f.skip)
		}
	}
}
