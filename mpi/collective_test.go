package mpi_test

import (
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

func TestBarrier(t *testing.T) {
	mpitest.Run(t, 3, func(t mpitest.T, c *mpi.Comm) {
		for range 10 {
			if err := c.Barrier(); err != nil {
				t.Fatal(err)
			}
		}
		// Rank 0 holds back; nobody's Ibarrier may complete before it joins.
		if c.Rank() == 0 {
			if err := c.Barrier(); err != nil { // after the others' Test
				t.Fatal(err)
			}
		}
		req, err := c.Ibarrier()
		if err != nil {
			t.Fatal(err)
		}
		if c.Rank() != 0 {
			if done, err := req.Test(); err != nil || done {
				t.Errorf("Ibarrier Test before rank 0 joined = %v, %v; want false, nil", done, err)
			}
			if err := c.Barrier(); err != nil {
				t.Fatal(err)
			}
		}
		if err := req.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBcast(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		root  int
		chunk int // 0: default chunk limit
	}{
		{name: "empty", n: 0, root: 0},
		{name: "one byte", n: 1, root: 2},
		{name: "small", n: 1000, root: 1},
		{name: "chunked", n: 100, root: 3, chunk: 7},
		{name: "chunked exact multiple", n: 21, root: 0, chunk: 7},
		{name: "chunked empty", n: 0, root: 1, chunk: 7},
	}
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		for _, tc := range cases {
			func() {
				if tc.chunk > 0 {
					defer mpi.SetChunkBytes(tc.chunk)()
				}
				want := pattern(tc.root, tc.n)
				buf := make([]byte, tc.n)
				if c.Rank() == tc.root {
					copy(buf, want)
				}
				if err := c.Bcast(buf, tc.root); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if d := diff(buf, want); d != "" {
					t.Errorf("%s: %s", tc.name, d)
				}
			}()
		}
	})
}

func TestAllgather(t *testing.T) {
	cases := []struct {
		name    string
		n       int
		chunk   int
		inPlace bool
	}{
		{name: "empty", n: 0},
		{name: "one byte", n: 1},
		{name: "uneven size", n: 13},
		{name: "in place", n: 13, inPlace: true},
		{name: "total above chunk limit", n: 13, chunk: 5},
		{name: "in place above chunk limit", n: 13, chunk: 5, inPlace: true},
		{name: "block equals chunk limit", n: 5, chunk: 5},
	}
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		size, rank := c.Size(), c.Rank()
		for _, tc := range cases {
			func() {
				if tc.chunk > 0 {
					defer mpi.SetChunkBytes(tc.chunk)()
				}
				var want []byte
				for r := range size {
					want = append(want, pattern(r, tc.n)...)
				}
				recv := make([]byte, size*tc.n)
				send := pattern(rank, tc.n)
				if tc.inPlace {
					copy(recv[rank*tc.n:], send)
					send = recv[rank*tc.n : (rank+1)*tc.n]
				}
				if err := c.Allgather(send, recv); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if d := diff(recv, want); d != "" {
					t.Errorf("%s: %s", tc.name, d)
				}
			}()
		}
	})
}
