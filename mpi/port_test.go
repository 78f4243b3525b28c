package mpi_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// TestPortTwoJobs connects a 2-rank job and a 1-rank job, started by
// separate mpiruns, through a port: both see the other as the remote
// group, the merged communicator orders the accepting job first, carries
// an allgather, and both disconnect, leaving no communicator behind.
func TestPortTwoJobs(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	file := filepath.Join(t.TempDir(), "port")
	env := []string{"M2N_TEST_PORT=" + file}
	body := func(accept bool) func(t mpitest.T, c *mpi.Comm) {
		return func(t mpitest.T, c *mpi.Comm) {
			_, comms := mpi.Live()
			var port string
			var err error
			path := os.Getenv("M2N_TEST_PORT")
			if accept && c.Rank() == 0 {
				if port, err = mpi.OpenPort(); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path+".tmp", []byte(port), 0o600); err != nil {
					t.Fatal(err)
				}
				os.Rename(path+".tmp", path)
			}
			if !accept {
				for deadline := time.Now().Add(20 * time.Second); port == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					b, _ := os.ReadFile(path)
					port = string(b)
				}
			}
			var ic *mpi.Comm
			if accept {
				ic, err = c.Accept(port, 0)
			} else {
				ic, err = c.Connect(port, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{true: 1, false: 2}[accept]
			if n, err := ic.RemoteSize(); err != nil || n != want {
				t.Errorf("remote size %d (%v), want %d", n, err, want)
			}
			m, err := ic.Merge(!accept)
			if err != nil {
				t.Fatal(err)
			}
			rank := c.Rank() + map[bool]int{true: 0, false: 2}[accept]
			if m.Size() != 3 || m.Rank() != rank {
				t.Errorf("merged rank %d of %d, want %d of 3", m.Rank(), m.Size(), rank)
			}
			all := make([]byte, 3)
			if err := m.Allgather([]byte{byte(10 + m.Rank())}, all); err != nil {
				t.Fatal(err)
			}
			if d := diff(all, []byte{10, 11, 12}); d != "" {
				t.Errorf("allgather over the merged communicator: %s", d)
			}
			if err := errors.Join(m.Free(), ic.Disconnect()); err != nil {
				t.Fatal(err)
			}
			if port != "" && accept {
				if err := mpi.ClosePort(port); err != nil {
					t.Error(err)
				}
			}
			if _, after := mpi.Live(); after != comms {
				t.Errorf("%d communicators live after the disconnect, want %d", after, comms)
			}
		}
	}
	a := mpitest.StartJob(t, uri, "accept", 2, env, body(true))
	b := mpitest.StartJob(t, uri, "connect", 1, env, body(false))
	if mpitest.InChild() {
		return
	}
	for _, j := range []*mpitest.Job{a, b} {
		if out, err := j.Wait(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
}

// TestPortArguments: bad arguments are refused before MPI is called.
func TestPortArguments(t *testing.T) {
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		for what, err := range map[string]error{
			"close an empty port":   mpi.ClosePort(""),
			"close a too long port": mpi.ClosePort(strings.Repeat("x", 1<<12)),
			"accept at root -1":     second(c.Accept("p", -1)),
			"connect at root 1":     second(c.Connect("p", 1)),
			"accept an empty port":  second(c.Accept("", 0)),
			"disconnect world":      mpi.World().Disconnect(),
		} {
			if !errors.Is(err, mpi.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", what, err)
			}
		}
	})
}

func second(_ *mpi.Comm, err error) error { return err }
