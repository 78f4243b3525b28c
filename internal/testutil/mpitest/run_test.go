package mpitest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/mpi"
)

func TestRunWorld(t *testing.T) {
	Run(t, 3, func(t T, c *mpi.Comm) {
		if got := c.Size(); got != 3 || t.Size() != 3 {
			t.Fatalf("c.Size() = %d, t.Size() = %d, want 3", got, t.Size())
		}
		if t.Rank() != c.Rank() {
			t.Errorf("t.Rank() = %d, c.Rank() = %d", t.Rank(), c.Rank())
		}
		if !mpi.Initialized() || mpi.Finalized() {
			t.Errorf("Initialized() = %v, Finalized() = %v inside the body", mpi.Initialized(), mpi.Finalized())
		}
		t.Logf("hello")
	})
}

// TestRunTwice checks that the child runs the right one of several Run
// calls in one test.
func TestRunTwice(t *testing.T) {
	for _, np := range []int{1, 2} {
		Run(t, np, func(t T, c *mpi.Comm) {
			if c.Size() != np {
				t.Errorf("Size() = %d, want %d", c.Size(), np)
			}
		})
	}
}

// The TestHelper tests are MPI jobs that fail on purpose; TestRunReports
// launches them and checks that the failure reaches the parent.
func helper(t *testing.T) {
	if os.Getenv("M2N_MPITEST_HELPER") != "1" {
		t.Skip("helper for TestRunReports; fails on purpose when it runs")
	}
}

func TestHelperFailingRank(t *testing.T) {
	helper(t)
	Run(t, 2, func(t T, c *mpi.Comm) {
		if t.Rank() == 1 {
			t.Errorf("boom %d", 42)
		}
	})
}

func TestHelperStuckPeer(t *testing.T) {
	helper(t)
	Run(t, 2, func(t T, c *mpi.Comm) {
		if t.Rank() == 1 {
			t.Fatal("gave up")
		}
		recv(c, 1) // never sent
	})
}

func TestHelperPanic(t *testing.T) {
	helper(t)
	Run(t, 2, func(t T, c *mpi.Comm) {
		if t.Rank() == 0 {
			panic("oops")
		}
		recv(c, 0) // never sent
	})
}

func TestHelperHang(t *testing.T) {
	helper(t)
	Run(t, 2, func(t T, c *mpi.Comm) {
		t.Log("waiting forever")
		recv(c, 1-t.Rank()) // never sent
	})
}

func TestHelperSkip(t *testing.T) {
	helper(t)
	Run(t, 2, func(t T, c *mpi.Comm) {
		t.Skip("not here")
	})
}

func TestRunReports(t *testing.T) {
	Require(t)
	cases := []struct {
		name     string
		test     string
		timeout  time.Duration
		want     []string // in the output
		timedOut bool
		wantErr  string
	}{
		{name: "failing rank", test: "TestHelperFailingRank", want: []string{"[1,1]<stdout>:", "rank 1/2: boom 42", "--- FAIL: TestHelperFailingRank"}, wantErr: "exit status"},
		{name: "stuck peer is aborted", test: "TestHelperStuckPeer", want: []string{"rank 1/2: gave up", "aborting the job"}, wantErr: "exit status"},
		{name: "panic aborts", test: "TestHelperPanic", want: []string{"rank 0/2 panicked: oops"}, wantErr: "exit status"},
		{name: "skip fails", test: "TestHelperSkip", want: []string{"Skip inside an MPI body is not supported"}, wantErr: "exit status"},
		{name: "hang times out", test: "TestHelperHang", timeout: 10 * time.Second, want: []string{"rank 0/2: waiting forever", "rank 1/2: waiting forever"}, timedOut: true},
		{name: "no such test", test: "TestNoSuchTest", wantErr: "never finished the body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 60 * time.Second
			}
			id := tc.test + "#1"
			out, err := launch(2, id, runPattern(tc.test), timeout, []string{"M2N_MPITEST_HELPER=1", "M2N_MPITEST_GRACE=1s"})
			if err == nil {
				t.Fatalf("launch succeeded; want an error. Output:\n%s", out)
			}
			if got := errors.Is(err, errTimeout); got != tc.timedOut {
				t.Errorf("errors.Is(err, errTimeout) = %v, want %v; err = %v", got, tc.timedOut, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.timedOut {
				if pids := processesWithEnv(childEnv + "=" + id); len(pids) > 0 {
					t.Errorf("processes %v of the killed job are still running", pids)
				}
			}
		})
	}
}

// processesWithEnv lists the processes whose environment holds kv, waiting
// up to 5 seconds for them to go (a loaded 2-core machine, the other cases'
// jobs running beside, takes more than one to reap a killed job).
func processesWithEnv(kv string) []string {
	var pids []string
	for range 50 {
		pids = pids[:0]
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			env, err := os.ReadFile(filepath.Join(d, "environ"))
			if err == nil && bytes.Contains(env, []byte("\x00"+kv+"\x00")) {
				pids = append(pids, filepath.Base(d))
			}
		}
		if len(pids) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return pids
}

func TestRunPattern(t *testing.T) {
	cases := []struct{ name, want string }{
		{"TestX", "^TestX$"},
		{"TestX/case_1", "^TestX$/^case_1$"},
		{"TestX/a.b(c)", `^TestX$/^a\.b\(c\)$`},
	}
	for _, tc := range cases {
		if got := runPattern(tc.name); got != tc.want {
			t.Errorf("runPattern(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90", 90 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"2m", 2 * time.Minute, true},
		{"0", 0, false},
		{"-3s", 0, false},
		{"soon", 0, false},
	}
	for _, tc := range cases {
		got, err := parseDuration(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestMissingRanks(t *testing.T) {
	cases := []struct {
		name string
		out  string
		np   int
		want []int
	}{
		{"all", "[1,0]<stdout>:" + okMarker + "0\n[1,1]<stdout>:" + okMarker + "1\n", 2, nil},
		{"one missing", "[1,1]<stdout>:" + okMarker + "1\n", 2, []int{0}},
		{"none", "PASS\n", 3, []int{0, 1, 2}},
		{"out of range ignored", okMarker + "5\n" + okMarker + "0\n", 1, nil},
	}
	for _, tc := range cases {
		if got := missingRanks(tc.out, tc.np); !equalInts(got, tc.want) {
			t.Errorf("%s: missingRanks = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recv waits for a one-byte message from rank src.
func recv(c *mpi.Comm, src int) {
	if r, err := c.Irecv(make([]byte, 1), src, 0); err == nil {
		r.Wait()
	}
}
