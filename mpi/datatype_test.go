package mpi_test

import (
	"errors"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/strided"
)

// TestDatatype posts one datatype, made once, several times: rank 0 sends
// a 2-D strided box of its buffer at three offsets, rank 1 receives the
// first contiguously and the others in place into a region of the same
// shape; every byte lands where the region says, and nothing else moves.
func TestDatatype(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		const rows, pitch = 9, 40
		box := strided.Desc{Run: 7, Count: []int64{3, 2}, Stride: []int64{2 * pitch, pitch}} // rows 0,1,2,3,4,5 in pairs
		dt, err := mpi.NewDatatype(box)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := dt.Free(); err != nil {
				t.Error(err)
			}
		}()
		if dt.Bytes() != box.Bytes() {
			t.Fatalf("Bytes() = %d, want %d", dt.Bytes(), box.Bytes())
		}
		offs := []int64{0, 3, pitch + 5}
		src := pattern(7, rows*pitch)
		if c.Rank() == 0 {
			var reqs []*mpi.Request
			for _, off := range offs {
				r, err := c.IsendType(src, off, dt, 1, int(off))
				if err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, r)
			}
			if err := mpi.Waitall(reqs); err != nil {
				t.Fatal(err)
			}
			return
		}
		flat := make([]byte, box.Bytes())
		r0, err := c.Irecv(flat, 0, int(offs[0]))
		if err != nil {
			t.Fatal(err)
		}
		dsts := [][]byte{make([]byte, rows*pitch), make([]byte, rows*pitch)}
		reqs := []*mpi.Request{r0}
		for i, off := range offs[1:] {
			r, err := c.IrecvType(dsts[i], off, dt, 0, int(off))
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, r)
		}
		if err := mpi.Waitall(reqs); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 0, box.Bytes())
		box.ForEachRun(func(o int64) { want = append(want, src[o:o+box.Run]...) })
		if d := diff(flat, want); d != "" {
			t.Errorf("contiguous receive: %s", d)
		}
		for i, off := range offs[1:] {
			exp := make([]byte, rows*pitch)
			box.ForEachRun(func(o int64) { copy(exp[off+o:off+o+box.Run], src[off+o:]) })
			if d := diff(dsts[i], exp); d != "" {
				t.Errorf("in-place receive at %d: %s", off, d)
			}
		}
	})
}

// TestDatatypeRefused checks the arguments a datatype refuses before MPI
// sees them: a bad shape, a region past the buffer, a freed datatype.
func TestDatatypeRefused(t *testing.T) {
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		for _, bad := range []strided.Desc{{Run: 0}, {Run: 4, Count: []int64{0}, Stride: []int64{8}}, {Run: 4, Count: []int64{2}}} {
			if _, err := mpi.NewDatatype(bad); !errors.Is(err, mpi.ErrInvalid) {
				t.Errorf("NewDatatype(%v) = %v, want ErrInvalid", bad, err)
			}
		}
		dt, err := mpi.NewDatatype(strided.Desc{Run: 4, Count: []int64{3}, Stride: []int64{8}})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 20) // the region spans 20 bytes from offset 0
		if _, err := c.IsendType(buf, 1, dt, 0, 0); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("IsendType past the buffer = %v, want ErrInvalid", err)
		}
		if err := dt.Free(); err != nil {
			t.Fatal(err)
		}
		if err := dt.Free(); err != nil {
			t.Errorf("second Free = %v, want nil", err)
		}
		if _, err := c.IrecvType(buf, 0, dt, 0, 0); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("IrecvType with a freed datatype = %v, want ErrInvalid", err)
		}
	})
}
