package mpi_test

import (
	"errors"
	"math"
	"testing"

	"github.com/m2n-dev/m2n/internal/mpitest"
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

func TestAllgatherv(t *testing.T) {
	cases := []struct {
		name    string
		counts  []int64
		displs  func(rank int) []int64 // nil: packed in rank order
		recvLen int                    // 0: end of the last block
		chunk   int
		inPlace bool
	}{
		{name: "uneven", counts: []int64{3, 0, 5, 1}},
		{name: "all empty", counts: []int64{0, 0, 0, 0}},
		{name: "one nonempty", counts: []int64{0, 0, 9, 0}},
		{name: "reversed with gaps", counts: []int64{3, 0, 5, 1},
			displs: func(int) []int64 { return []int64{20, 0, 4, 1} }, recvLen: 23},
		{name: "displacements differ per rank", counts: []int64{3, 0, 5, 1},
			displs: func(r int) []int64 { return []int64{int64(r), 12, int64(r) + 3, int64(r) + 8} }, recvLen: 12},
		{name: "in place", counts: []int64{3, 0, 5, 1}, inPlace: true},
		{name: "total above chunk limit", counts: []int64{3, 0, 5, 1}, chunk: 4},
		{name: "total above chunk limit with gaps", counts: []int64{3, 0, 5, 1}, chunk: 2,
			displs: func(int) []int64 { return []int64{20, 0, 4, 1} }, recvLen: 23},
		{name: "in place above chunk limit", counts: []int64{3, 0, 5, 1}, chunk: 4, inPlace: true},
		{name: "displacements above chunk limit", counts: []int64{2, 3, 1, 2}, chunk: 16,
			displs: func(int) []int64 { return []int64{30, 10, 20, 0} }, recvLen: 32},
	}
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		rank := c.Rank()
		for _, tc := range cases {
			func() {
				if tc.chunk > 0 {
					defer mpi.SetChunkBytes(tc.chunk)()
				}
				displs := make([]int64, len(tc.counts))
				var end int64
				for r, n := range tc.counts {
					displs[r] = end
					end += n
				}
				if tc.displs != nil {
					displs = tc.displs(rank)
				}
				recvLen := int(end)
				if tc.recvLen > 0 {
					recvLen = tc.recvLen
				}
				recv := make([]byte, recvLen)
				want := make([]byte, recvLen)
				for r, n := range tc.counts {
					copy(want[displs[r]:], pattern(r, int(n)))
				}
				send := pattern(rank, int(tc.counts[rank]))
				if tc.inPlace {
					copy(recv[displs[rank]:], send)
					send = recv[displs[rank] : displs[rank]+tc.counts[rank]]
				}
				if err := c.Allgatherv(send, recv, tc.counts, displs); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if d := diff(recv, want); d != "" {
					t.Errorf("%s: %s", tc.name, d)
				}
			}()
		}
	})
}

func TestAllreduce(t *testing.T) {
	// Rank r contributes element i = int64(r*10 + i) (and bit r for the
	// bitwise ops); want is what 4 ranks make of element i.
	const np = 4
	ints := []struct {
		op   mpi.Op
		val  func(r, i int) int64
		want func(i int) int64
	}{
		{mpi.Sum, func(r, i int) int64 { return int64(r*10 + i) }, func(i int) int64 { return int64(60 + 4*i) }},
		{mpi.Max, func(r, i int) int64 { return int64(r*10 + i) }, func(i int) int64 { return int64(30 + i) }},
		{mpi.Min, func(r, i int) int64 { return int64(r*10 - i) }, func(i int) int64 { return int64(-i) }},
		{mpi.Prod, func(r, i int) int64 { return int64(r + i + 1) }, func(i int) int64 { return int64((i + 1) * (i + 2) * (i + 3) * (i + 4)) }},
		{mpi.BOr, func(r, i int) int64 { return 1 << (r + i) }, func(i int) int64 { return 0xf << i }},
		{mpi.BAnd, func(r, i int) int64 { return ^(int64(1) << r) }, func(int) int64 { return ^int64(0xf) }},
	}
	floats := []struct {
		op   mpi.Op
		want func(i int) float64
	}{
		{mpi.Sum, func(i int) float64 { return 0.5*6 + 4*float64(i) }},
		{mpi.Max, func(i int) float64 { return 0.5*3 + float64(i) }},
		{mpi.Min, func(i int) float64 { return float64(i) }},
	}
	cases := []struct {
		name    string
		n       int
		chunk   int
		inPlace bool
	}{
		{name: "empty", n: 0},
		{name: "five", n: 5},
		{name: "in place", n: 5, inPlace: true},
		{name: "chunked", n: 5, chunk: 16},
		{name: "chunk below one element", n: 3, chunk: 3},
		{name: "chunked in place", n: 5, chunk: 16, inPlace: true},
	}
	mpitest.Run(t, np, func(t mpitest.T, c *mpi.Comm) {
		r := c.Rank()
		for _, tc := range cases {
			func() {
				if tc.chunk > 0 {
					defer mpi.SetChunkBytes(tc.chunk)()
				}
				for _, o := range ints {
					send, recv := make([]int64, tc.n), make([]int64, tc.n)
					for i := range send {
						send[i] = o.val(r, i)
					}
					if tc.inPlace {
						recv = send
					}
					if err := c.AllreduceInt64(send, recv, o.op); err != nil {
						t.Fatalf("%s: int64 %v: %v", tc.name, o.op, err)
					}
					for i := range recv {
						if recv[i] != o.want(i) {
							t.Errorf("%s: int64 %v: element %d = %d, want %d", tc.name, o.op, i, recv[i], o.want(i))
						}
					}
				}
				for _, o := range floats {
					send, recv := make([]float64, tc.n), make([]float64, tc.n)
					for i := range send {
						send[i] = 0.5*float64(r) + float64(i)
					}
					if tc.inPlace {
						recv = send
					}
					if err := c.AllreduceFloat64(send, recv, o.op); err != nil {
						t.Fatalf("%s: float64 %v: %v", tc.name, o.op, err)
					}
					for i := range recv {
						if math.Abs(recv[i]-o.want(i)) > 1e-12 {
							t.Errorf("%s: float64 %v: element %d = %v, want %v", tc.name, o.op, i, recv[i], o.want(i))
						}
					}
				}
			}()
		}
		// Bitwise ops do not apply to float64: MPI itself says so.
		var e *mpi.Error
		err := c.AllreduceFloat64([]float64{1}, []float64{0}, mpi.BAnd)
		if !errors.As(err, &e) || e.Op != "MPI_Allreduce" {
			t.Errorf("AllreduceFloat64 with BAnd: %v, want *Error from MPI_Allreduce", err)
		}
		if err := c.AllreduceInt64([]int64{1}, []int64{0, 0}, mpi.Sum); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("mismatched lengths: %v, want ErrInvalid", err)
		}
		if err := c.AllreduceInt64([]int64{1}, []int64{0}, mpi.Op(99)); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("unknown op: %v, want ErrInvalid", err)
		}
	})
}
