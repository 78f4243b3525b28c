package mpi_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/strided"
)

// TestIrecvStatus receives from AnySource with AnyTag, completing the
// requests through Wait, Test, Waitall and Testall, and checks that each
// Status names the sender, its tag and the bytes that came.
func TestIrecvStatus(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		size, rank := c.Size(), c.Rank()
		length := func(r int) int { return 10 + r } // shorter than the receive buffers
		if rank != 0 {
			if err := c.Send(pattern(rank, length(rank)), 0, 20+rank); err != nil {
				t.Fatal(err)
			}
		} else {
			bufs := make([][]byte, size-1)
			reqs := make([]*mpi.Request, size-1)
			for i := range reqs {
				bufs[i] = make([]byte, 64)
				var err error
				if reqs[i], err = c.Irecv(bufs[i], mpi.AnySource, mpi.AnyTag); err != nil {
					t.Fatal(err)
				}
			}
			if err := reqs[0].Wait(); err != nil {
				t.Fatal(err)
			}
			for done := false; !done; {
				var err error
				if done, err = reqs[1].Test(); err != nil {
					t.Fatal(err)
				}
			}
			if err := mpi.Waitall(reqs[2:]); err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for i, r := range reqs {
				st, ok := r.Status()
				if !ok {
					t.Fatalf("request %d: no Status after it completed", i)
				}
				if st.Source < 1 || st.Source >= size || seen[st.Source] {
					t.Fatalf("request %d: Status %+v: source not a new sender", i, st)
				}
				seen[st.Source] = true
				want := mpi.Status{Source: st.Source, Tag: 20 + st.Source, Bytes: length(st.Source)}
				if st != want {
					t.Errorf("request %d: Status %+v, want %+v", i, st, want)
				}
				if d := diff(bufs[i][:st.Bytes], pattern(st.Source, st.Bytes)); d != "" {
					t.Errorf("request %d, from %d: %s", i, st.Source, d)
				}
			}
		}
		if err := c.Barrier(); err != nil {
			t.Fatal(err)
		}

		// A receive in several pieces (Testall completes it), a strided
		// receive, and what has no Status: a send, a pending receive.
		func() {
			defer mpi.SetChunkBytes(4)()
			switch rank {
			case 0:
				buf := make([]byte, 10)
				r, err := c.Irecv(buf, 1, 5)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := r.Status(); ok {
					t.Errorf("Status of a pending receive: ok")
				}
				if err := c.Barrier(); err != nil { // rank 1 sends after it
					t.Fatal(err)
				}
				for done := false; !done; {
					if done, err = mpi.Testall([]*mpi.Request{r}); err != nil {
						t.Fatal(err)
					}
				}
				if st, ok := r.Status(); !ok || st != (mpi.Status{Source: 1, Tag: 5, Bytes: 10}) {
					t.Errorf("chunked receive: Status %+v, %v; want {1 5 10 false}, true", st, ok)
				}
				if d := diff(buf, pattern(1, 10)); d != "" {
					t.Errorf("chunked receive: %s", d)
				}
				region := make([]byte, 12)
				at := strided.Desc{Offset: 1, Run: 2, Count: []int64{2}, Stride: []int64{4}} // 4 bytes: one piece
				rs, err := c.IrecvStrided(region, at, 2, 6)
				if err != nil {
					t.Fatal(err)
				}
				if err := rs.Wait(); err != nil {
					t.Fatal(err)
				}
				if st, ok := rs.Status(); !ok || st != (mpi.Status{Source: 2, Tag: 6, Bytes: 4}) {
					t.Errorf("strided receive: Status %+v, %v; want {2 6 4 false}, true", st, ok)
				}
				if want := pattern(2, 4); region[1] != want[0] || region[2] != want[1] || region[5] != want[2] || region[6] != want[3] {
					t.Errorf("strided receive: region %v, want the runs %v at 1 and 5", region, want)
				}
			case 1:
				if err := c.Barrier(); err != nil {
					t.Fatal(err)
				}
				r, err := c.Isend(pattern(1, 10), 0, 5)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Wait(); err != nil {
					t.Fatal(err)
				}
				if _, ok := r.Status(); ok {
					t.Errorf("Status of a send: ok")
				}
			default:
				if err := c.Barrier(); err != nil {
					t.Fatal(err)
				}
				if rank == 2 {
					if err := c.Send(pattern(2, 4), 0, 6); err != nil {
						t.Fatal(err)
					}
				}
			}
		}()
		var none *mpi.Request
		if _, ok := none.Status(); ok {
			t.Errorf("Status of a nil Request: ok")
		}
	})
}

// TestCancel withdraws receives that no message matches (plain, from
// AnySource, chunked, strided, empty) and checks that they complete, unpin
// and leave Live where it was; that a receive whose message had arrived
// reports it instead; and that sends and barriers cannot be cancelled.
func TestCancel(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		rank, peer := c.Rank(), 1-c.Rank()
		reqs0, comms0 := mpi.Live()
		cancel := func(what string, r *mpi.Request) {
			t.Helper()
			cancelled, err := r.Cancel()
			if err != nil || !cancelled {
				t.Fatalf("%s: Cancel = %v, %v; want true, nil", what, cancelled, err)
			}
			if mpi.Pinned(r) {
				t.Errorf("%s: still pinned after Cancel", what)
			}
			if st, ok := r.Status(); !ok || !st.Cancelled {
				t.Errorf("%s: Status after Cancel = %+v, %v; want Cancelled, true", what, st, ok)
			}
			if done, err := r.Test(); !done || err != nil {
				t.Errorf("%s: Test after Cancel = %v, %v; want true, nil", what, done, err)
			}
			if cancelled, err := r.Cancel(); !cancelled || err != nil {
				t.Errorf("%s: second Cancel = %v, %v; want true, nil", what, cancelled, err)
			}
		}

		buf := make([]byte, 16)
		r, err := c.Irecv(buf, peer, 99)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := mpi.Live(); n != reqs0+1 {
			t.Errorf("Live with one pending receive: %d requests, want %d", n, reqs0+1)
		}
		cancel("receive from the peer", r)

		// An abort listener: posted on AnySource, polled, torn down. Its
		// tag is one no message of this test uses: on AnyTag it could match
		// the peer's send below (tag 7), which the peer may post while
		// this rank still polls.
		r, err = c.Irecv(make([]byte, 8), mpi.AnySource, 4242)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			if done, err := r.Test(); err != nil || done {
				t.Fatalf("listener Test = %v, %v; want false, nil", done, err)
			}
		}
		cancel("AnySource listener", r)

		func() {
			defer mpi.SetChunkBytes(4)()
			r, err := c.Irecv(make([]byte, 10), peer, 98)
			if err != nil {
				t.Fatal(err)
			}
			cancel("receive in 3 pieces", r)
		}()

		r, err = c.IrecvStrided(make([]byte, 12), strided.Desc{Run: 2, Count: []int64{3}, Stride: []int64{4}}, peer, 97)
		if err != nil {
			t.Fatal(err)
		}
		cancel("strided receive", r)

		r, err = c.Irecv(nil, peer, 96)
		if err != nil {
			t.Fatal(err)
		}
		cancel("empty receive", r)

		for i := range 1000 {
			r, err := c.Irecv(buf, mpi.AnySource, 95)
			if err != nil {
				t.Fatal(err)
			}
			if cancelled, err := r.Cancel(); !cancelled || err != nil {
				t.Fatalf("post and cancel %d: %v, %v", i, cancelled, err)
			}
		}

		// A message that had already arrived: Cancel reports it received.
		if rank == 1 {
			if err := c.Send(pattern(1, 5), 0, 7); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Barrier(); err != nil { // rank 0 has the message queued
			t.Fatal(err)
		}
		if rank == 0 {
			got := make([]byte, 8)
			r, err := c.Irecv(got, mpi.AnySource, 7)
			if err != nil {
				t.Fatal(err)
			}
			cancelled, err := r.Cancel()
			if err != nil || cancelled {
				t.Errorf("Cancel of a matched receive = %v, %v; want false, nil", cancelled, err)
			}
			if cancelled {
				// Keep the job consistent: take the message after all.
				if err := c.Recv(got, 1, 7); err != nil {
					t.Fatal(err)
				}
			} else if st, ok := r.Status(); !ok || st != (mpi.Status{Source: 1, Tag: 7, Bytes: 5}) {
				t.Errorf("matched receive: Status %+v, %v; want {1 7 5 false}, true", st, ok)
			} else if d := diff(got[:5], pattern(1, 5)); d != "" {
				t.Errorf("matched receive: %s", d)
			}
		}

		// A chunked receive whose first piece arrived: cancelled, with
		// that piece's bytes counted.
		func() {
			defer mpi.SetChunkBytes(4)()
			if rank == 1 {
				if err := c.Send(pattern(1, 4), 0, 94); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Barrier(); err != nil {
				t.Fatal(err)
			}
			if rank == 0 {
				got := make([]byte, 10)
				r, err := c.Irecv(got, 1, 94)
				if err != nil {
					t.Fatal(err)
				}
				cancelled, err := r.Cancel()
				if err != nil || !cancelled {
					t.Fatalf("Cancel of a half-received receive = %v, %v; want true, nil", cancelled, err)
				}
				if st, _ := r.Status(); st != (mpi.Status{Source: 1, Tag: 94, Bytes: 4, Cancelled: true}) {
					t.Errorf("half-received receive: Status %+v, want {1 94 4 true}", st)
				}
				if d := diff(got[:4], pattern(1, 4)); d != "" {
					t.Errorf("half-received receive: %s", d)
				}
			}
		}()

		// Sends and barriers are not receives: refused, still pending.
		s, err := c.Isend(pattern(rank, 3), peer, 8)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("Cancel of a send: %v, want ErrInvalid", err)
		}
		in := make([]byte, 3)
		if err := c.Recv(in, peer, 8); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
		b, err := c.Ibarrier()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Cancel(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("Cancel of an Ibarrier: %v, want ErrInvalid", err)
		}
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
		var none *mpi.Request
		if cancelled, err := none.Cancel(); cancelled || err != nil {
			t.Errorf("Cancel of a nil Request = %v, %v; want false, nil", cancelled, err)
		}
		if reqs, comms := mpi.Live(); reqs != reqs0 || comms != comms0 {
			t.Errorf("Live after the cancels: %d requests, %d comms; want %d, %d", reqs, comms, reqs0, comms0)
		}
	})
}

// TestDroppedRequestHeld drops a receive no message will match before it
// completes, as a round given up on a timeout does, and collects garbage:
// the package holds the Request, so its buffer stays pinned and the
// runtime's check for leaked pins (a panic in the finalizer, which ended
// ranks at the end of failed jobs) never fires. Cancel then completes it.
func TestDroppedRequestHeld(t *testing.T) {
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		before, _ := mpi.Live()
		func() {
			if _, err := c.Irecv(make([]byte, 64), 0, 4242); err != nil {
				t.Fatal(err)
			}
		}()
		for range 3 {
			runtime.GC()
			time.Sleep(20 * time.Millisecond) // finalizers run
		}
		if n, _ := mpi.Live(); n != before+1 {
			t.Errorf("Live = %d requests after dropping one, want %d", n, before+1)
		}
		var found bool
		for _, r := range mpi.Held() {
			if st, _ := r.Status(); !st.Cancelled {
				if ok, err := r.Cancel(); err != nil || !ok {
					t.Errorf("Cancel of the dropped receive = %v, %v", ok, err)
				}
				found = true
			}
		}
		if !found {
			t.Error("the dropped receive is not held")
		}
		if n, _ := mpi.Live(); n != before {
			t.Errorf("Live = %d requests after Cancel, want %d", n, before)
		}
	})
}
