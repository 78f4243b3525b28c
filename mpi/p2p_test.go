package mpi_test

import (
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// TestRing has every rank post many receives from its left neighbour and
// many sends to its right one, in opposite tag orders, and wait for all at
// once.
func TestRing(t *testing.T) {
	cases := []struct {
		name  string
		msgs  int
		size  func(i int) int
		chunk int
		tag   func(i int) int // nil: tag i
	}{
		{name: "many small", msgs: 64, size: func(i int) int { return 1 + i%17 }},
		{name: "empty messages", msgs: 8, size: func(int) int { return 0 }},
		{name: "large", msgs: 4, size: func(i int) int { return 1<<20 + i }},
		{name: "chunked", msgs: 32, size: func(i int) int { return 3 * i }, chunk: 10},
		// Same tag for all: order alone matches the pieces of each message.
		{name: "chunked one tag", msgs: 32, size: func(i int) int { return 3 * i }, chunk: 10, tag: func(int) int { return 3 }},
	}
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		size, rank := c.Size(), c.Rank()
		right, left := (rank+1)%size, (rank+size-1)%size
		for _, tc := range cases {
			func() {
				if tc.chunk > 0 {
					defer mpi.SetChunkBytes(tc.chunk)()
				}
				tag := tc.tag
				if tag == nil {
					tag = func(i int) int { return i }
				}
				var reqs []*mpi.Request
				in := make([][]byte, tc.msgs)
				for i := range in {
					in[i] = make([]byte, tc.size(i))
					r, err := c.Irecv(in[i], left, tag(i))
					if err != nil {
						t.Fatalf("%s: Irecv %d: %v", tc.name, i, err)
					}
					reqs = append(reqs, r)
				}
				order := make([]int, tc.msgs)
				for i := range order {
					order[i] = tc.msgs - 1 - i // reversed, unless tags must keep order
					if tc.tag != nil {
						order[i] = i
					}
				}
				for _, i := range order {
					r, err := c.Isend(pattern(rank*1000+i, tc.size(i)), right, tag(i))
					if err != nil {
						t.Fatalf("%s: Isend %d: %v", tc.name, i, err)
					}
					if want := max(1, (tc.size(i)+tc.chunk-1)/max(1, tc.chunk)); tc.chunk > 0 && mpi.Parts(r) != want {
						t.Errorf("%s: Isend of %d bytes with chunk %d: %d parts, want %d", tc.name, tc.size(i), tc.chunk, mpi.Parts(r), want)
					}
					reqs = append(reqs, r)
				}
				if err := mpi.Waitall(reqs); err != nil {
					t.Fatalf("%s: Waitall: %v", tc.name, err)
				}
				for i, r := range reqs {
					if mpi.Pinned(r) {
						t.Errorf("%s: request %d still pinned after Waitall", tc.name, i)
					}
				}
				for i := range in {
					if d := diff(in[i], pattern(left*1000+i, tc.size(i))); d != "" {
						t.Errorf("%s: message %d: %s", tc.name, i, d)
					}
				}
			}()
		}
	})
}

// TestTestall checks that Testall and Test report pending requests without
// blocking and complete them once the data has come.
func TestTestall(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		defer mpi.SetChunkBytes(4)() // two-part messages
		const n = 6
		if c.Rank() == 1 {
			if err := c.Barrier(); err != nil { // rank 0 has tested
				t.Fatal(err)
			}
			for tag := range 2 {
				if err := c.Send(pattern(tag, n), 0, tag); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		a, b := make([]byte, n), make([]byte, n)
		ra, err := c.Irecv(a, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := c.Irecv(b, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		reqs := []*mpi.Request{ra, nil, rb}
		if done, err := mpi.Testall(reqs); err != nil || done {
			t.Errorf("Testall before the sends = %v, %v; want false, nil", done, err)
		}
		if done, err := ra.Test(); err != nil || done {
			t.Errorf("Test before the sends = %v, %v; want false, nil", done, err)
		}
		if !mpi.Pinned(ra) || !mpi.Pinned(rb) {
			t.Errorf("pending requests are not pinned")
		}
		if err := c.Barrier(); err != nil {
			t.Fatal(err)
		}
		for {
			done, err := ra.Test()
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
		}
		if mpi.Pinned(ra) {
			t.Errorf("request still pinned after Test returned true")
		}
		for {
			done, err := mpi.Testall(reqs)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
		}
		if mpi.Pinned(rb) {
			t.Errorf("request still pinned after Testall returned true")
		}
		if d := diff(a, pattern(0, n)) + diff(b, pattern(1, n)); d != "" {
			t.Errorf("received: %s", d)
		}
		// Completed and nil requests are complete.
		if err := ra.Wait(); err != nil {
			t.Errorf("Wait on a completed request: %v", err)
		}
		var none *mpi.Request
		if done, err := none.Test(); !done || err != nil {
			t.Errorf("Test on nil = %v, %v; want true, nil", done, err)
		}
		if err := mpi.Waitall(reqs); err != nil {
			t.Errorf("Waitall on completed requests: %v", err)
		}
	})
}
