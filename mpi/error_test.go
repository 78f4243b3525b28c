package mpi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// TestErrorsReturn checks that MPI errors come back as *Error naming the MPI
// call, on World and on derived communicators, and that the job goes on
// working afterwards: MPI_ERRORS_RETURN is really in force.
func TestErrorsReturn(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		sub, err := c.Split(0, c.Rank())
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Free()
		dup, err := c.Dup()
		if err != nil {
			t.Fatal(err)
		}
		defer dup.Free()
		size := c.Size()
		cases := []struct {
			name string
			call func() error
			op   string
		}{
			{"Isend to a rank beyond Size", func() error { _, err := c.Isend([]byte{1}, size, 0); return err }, "MPI_Isend"},
			{"Isend on a split comm", func() error { _, err := sub.Isend([]byte{1}, size, 0); return err }, "MPI_Isend"},
			{"Isend on a dup", func() error { _, err := dup.Isend(nil, size+5, 0); return err }, "MPI_Isend"},
			{"Irecv from a rank beyond Size", func() error { _, err := c.Irecv(make([]byte, 1), size, 0); return err }, "MPI_Irecv"},
			{"Bcast from a root beyond Size", func() error { return c.Bcast([]byte{1}, size) }, "MPI_Bcast"},
		}
		for _, tc := range cases {
			err := tc.call()
			var e *mpi.Error
			if !errors.As(err, &e) {
				t.Errorf("%s: error %v (%T), want *mpi.Error", tc.name, err, err)
				continue
			}
			if e.Op != tc.op || e.Code == 0 || e.Msg == "" {
				t.Errorf("%s: %+v, want Op %s with a code and message", tc.name, *e, tc.op)
			}
			if want := "mpi: " + tc.op + ": "; !strings.HasPrefix(e.Error(), want) {
				t.Errorf("%s: Error() = %q, want prefix %q", tc.name, e.Error(), want)
			}
			t.Logf("%s: %v (code %d)", tc.name, e, e.Code)
		}
		// Still alive and talking.
		got := make([]byte, size)
		if err := c.Allgather([]byte{byte(c.Rank())}, got); err != nil {
			t.Fatalf("Allgather after the errors: %v", err)
		}
	})
}

// TestInvalidArguments checks the contract violations caught before MPI is
// called.
func TestInvalidArguments(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		var none *mpi.Comm
		cases := []struct {
			name string
			call func() error
		}{
			{"Init twice", func() error { _, err := mpi.Init(mpi.ThreadSingle); return err }},
			{"Barrier on nil comm", func() error { return none.Barrier() }},
			{"Isend on nil comm", func() error { _, err := none.Isend(nil, 0, 0); return err }},
			{"Isend to a negative rank", func() error { _, err := c.Isend(nil, -3, 0); return err }},
			{"Isend with a negative tag", func() error { _, err := c.Isend(nil, 0, -2); return err }},
			{"Irecv from a negative rank", func() error { _, err := c.Irecv(nil, -3, 0); return err }},
			{"Irecv with a negative tag", func() error { _, err := c.Irecv(nil, 0, -5); return err }},
			{"Irecv AnySource over two chunks", func() error {
				defer mpi.SetChunkBytes(4)()
				_, err := c.Irecv(make([]byte, 5), mpi.AnySource, 0)
				return err
			}},
			{"Irecv AnyTag over two chunks", func() error {
				defer mpi.SetChunkBytes(4)()
				_, err := c.Irecv(make([]byte, 5), 0, mpi.AnyTag)
				return err
			}},
			{"Allgather with a short recv", func() error { return c.Allgather([]byte{1, 2}, make([]byte, 3)) }},
			{"Free world", func() error { return c.Free() }},
		}
		for _, tc := range cases {
			if err := tc.call(); !errors.Is(err, mpi.ErrInvalid) {
				t.Errorf("%s: %v, want an error wrapping ErrInvalid", tc.name, err)
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Rank on a nil comm did not panic")
				}
			}()
			none.Rank()
		}()
	})
}

// TestCompletionErrors checks errors that MPI reports when a request
// completes: a receive buffer shorter than the message it matches. The
// message is large enough for OpenMPI's rendezvous protocol: truncating a
// small, eagerly sent message sometimes leaves OpenMPI 4.1 (ob1, vader) hung
// in later communication between the two ranks when the machine is loaded;
// a C program shows the same. Each case runs on its own communicator with
// the receive posted first.
func TestCompletionErrors(t *testing.T) {
	cases := []struct {
		name string
		wait func(r *mpi.Request) error
		op   string
	}{
		{"Wait", func(r *mpi.Request) error { return r.Wait() }, "MPI_Waitall"},
		{"Waitall", func(r *mpi.Request) error { return mpi.Waitall([]*mpi.Request{nil, r}) }, "MPI_Waitall"},
		{"Testall", func(r *mpi.Request) error {
			for {
				done, err := mpi.Testall([]*mpi.Request{r})
				if done || err != nil {
					return err
				}
			}
		}, "MPI_Testall"},
	}
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		for _, tc := range cases {
			d, err := c.Dup()
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free()
			if c.Rank() == 0 {
				if err := d.Barrier(); err != nil { // the receive is posted
					t.Fatal(err)
				}
				if err := d.Send(make([]byte, 128<<10), 1, 0); err != nil {
					t.Fatal(err)
				}
				continue
			}
			r, err := d.Irecv(make([]byte, 64<<10), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Barrier(); err != nil {
				t.Fatal(err)
			}
			err = tc.wait(r)
			var e *mpi.Error
			if !errors.As(err, &e) || e.Op != tc.op || !strings.Contains(e.Msg, "TRUNCATE") {
				t.Errorf("%s of a truncated receive: %v, want *Error from %s about truncation", tc.name, err, tc.op)
			} else {
				t.Logf("%s: %v", tc.name, err)
			}
			if mpi.Pinned(r) {
				t.Errorf("%s: the failed request still pins its buffer", tc.name)
			}
		}
	})
}
