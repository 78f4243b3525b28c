package mpi

/*
#include "cmpi.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Barrier blocks until every rank of c has called it (MPI_Barrier).
func (c *Comm) Barrier() error {
	h, err := c.handle("MPI_Barrier")
	if err != nil {
		return err
	}
	return check("MPI_Barrier", C.MPI_Barrier(h))
}

// Ibarrier starts a barrier over c (MPI_Ibarrier) and returns at once; the
// returned Request completes when every rank of c has called Ibarrier.
func (c *Comm) Ibarrier() (*Request, error) {
	h, err := c.handle("MPI_Ibarrier")
	if err != nil {
		return nil, err
	}
	var q C.MPI_Request
	if err := check("MPI_Ibarrier", C.MPI_Ibarrier(h, &q)); err != nil {
		return nil, err
	}
	return &Request{h: []C.MPI_Request{q}}, nil
}

// Bcast copies buf on rank root into buf on every other rank of c
// (MPI_Bcast). Every rank must pass a buf of the same length. A buf longer
// than the chunk limit (1 GiB) is broadcast in pieces of at most that size,
// one MPI_Bcast each. An empty buf is allowed.
func (c *Comm) Bcast(buf []byte, root int) error {
	h, err := c.handle("MPI_Bcast")
	if err != nil {
		return err
	}
	return bcast(h, buf, root)
}

func bcast(h C.MPI_Comm, buf []byte, root int) error {
	return forChunks(len(buf), func(off, n int) error {
		return check("MPI_Bcast", C.MPI_Bcast(at(buf, off), C.int(n), C.m2n_byte(), C.int(root), h))
	})
}

// Allgather gathers every rank's send into recv on every rank of c
// (MPI_Allgather): recv[r*len(send) : (r+1)*len(send)] receives rank r's
// send. Every rank must pass a send of the same length, and len(recv) must
// be c.Size()*len(send); otherwise Allgather returns an error wrapping
// ErrInvalid. send may be recv's own block (in place); it must not overlap
// recv otherwise. Empty buffers are allowed.
//
// When len(recv) exceeds the chunk limit (1 GiB), Allgather runs as one
// chunked Bcast per rank instead of one MPI_Allgather, so that no count or
// displacement passed to MPI exceeds that limit.
func (c *Comm) Allgather(send, recv []byte) error {
	const op = "MPI_Allgather"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	size, rank := c.Size(), c.Rank()
	n := len(send)
	if len(recv) != size*n {
		return invalid(op, "len(recv) = %d, want Size()*len(send) = %d*%d", len(recv), size, n)
	}
	if len(recv) > chunkBytes {
		counts := make([]int64, size)
		displs := make([]int64, size)
		for r := range counts {
			counts[r], displs[r] = int64(n), int64(r*n)
		}
		return bcastBlocks(h, rank, send, recv, counts, displs)
	}
	sp, inPlace := at(send, 0), C.int(0)
	if n > 0 && sp == at(recv, rank*n) {
		sp, inPlace = nil, 1
	}
	return check(op, C.m2n_allgather(sp, C.int(n), at(recv, 0), h, inPlace))
}

// Allgatherv gathers every rank's send into recv on every rank of c
// (MPI_Allgatherv): rank r's send lands at recv[displs[r] :
// displs[r]+counts[r]]. counts must be the same on every rank and
// len(send) must be counts[c.Rank()]; displs may differ between ranks.
// len(counts) and len(displs) must be c.Size(), counts and displs must be
// non-negative and every block must lie inside recv; otherwise Allgatherv
// returns an error wrapping ErrInvalid. Blocks must not overlap. send may be
// the rank's own block of recv (in place); it must not overlap recv
// otherwise. Counts of 0 are allowed.
//
// Counts and displacements are int64 and may exceed 2^31. When the sum of
// counts exceeds the chunk limit (1 GiB), Allgatherv runs as one chunked
// Bcast per rank with a non-empty block; when only the displacements do, it
// gathers into a compact temporary buffer and copies the blocks out.
func (c *Comm) Allgatherv(send, recv []byte, counts, displs []int64) error {
	const op = "MPI_Allgatherv"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	size, rank := c.Size(), c.Rank()
	if len(counts) != size || len(displs) != size {
		return invalid(op, "len(counts) = %d and len(displs) = %d, want Size() = %d", len(counts), len(displs), size)
	}
	var total, span int64
	for r := range size {
		n, d := counts[r], displs[r]
		if n < 0 || d < 0 || d > int64(len(recv)) || n > int64(len(recv))-d {
			return invalid(op, "rank %d's block [%d, %d+%d) is not inside recv of length %d", r, d, d, n, len(recv))
		}
		total += n
		if n > 0 {
			span = max(span, d+n)
		}
	}
	if int64(len(send)) != counts[rank] {
		return invalid(op, "len(send) = %d, want counts[%d] = %d", len(send), rank, counts[rank])
	}
	if total > int64(chunkBytes) {
		return bcastBlocks(h, rank, send, recv, counts, displs)
	}
	cc := make([]C.int, size)
	cd := make([]C.int, size)
	if span <= int64(chunkBytes) {
		for r := range size {
			cc[r] = C.int(counts[r])
			if counts[r] > 0 {
				cd[r] = C.int(displs[r])
			}
		}
		sp, inPlace := at(send, 0), C.int(0)
		if len(send) > 0 && sp == at(recv, int(displs[rank])) {
			sp, inPlace = nil, 1
		}
		return check(op, C.m2n_allgatherv(sp, C.int(len(send)), at(recv, 0), &cc[0], &cd[0], h, inPlace))
	}
	// The blocks fit in one call but their displacements do not: gather
	// them packed, then move each to its place.
	tmp := make([]byte, total)
	var off int64
	for r := range size {
		cc[r], cd[r] = C.int(counts[r]), C.int(off)
		off += counts[r]
	}
	if err := check(op, C.m2n_allgatherv(at(send, 0), C.int(len(send)), at(tmp, 0), &cc[0], &cd[0], h, 0)); err != nil {
		return err
	}
	for r := range size {
		copy(recv[displs[r]:displs[r]+counts[r]], tmp[cd[r]:int64(cd[r])+counts[r]])
	}
	return nil
}

// bcastBlocks implements Allgather(v) for large totals: each rank's block is
// broadcast from that rank, in chunks. The decision to take this path
// depends only on counts, which every rank shares, so all ranks take it.
func bcastBlocks(h C.MPI_Comm, rank int, send, recv []byte, counts, displs []int64) error {
	for r := range counts {
		if counts[r] == 0 {
			continue
		}
		blk := recv[displs[r] : displs[r]+counts[r]]
		if r == rank {
			copy(blk, send)
		}
		if err := bcast(h, blk, r); err != nil {
			return err
		}
	}
	return nil
}

// Op is a reduction operation for AllreduceInt64 and AllreduceFloat64.
type Op int

// The reduction operations. BAnd and BOr are bitwise and apply to int64
// only; with AllreduceFloat64 MPI rejects them with an *Error.
const (
	Sum  Op = iota // MPI_SUM
	Max            // MPI_MAX
	Min            // MPI_MIN
	Prod           // MPI_PROD
	BAnd           // MPI_BAND, bitwise and
	BOr            // MPI_BOR, bitwise or
)

// String returns the MPI name of o, such as "MPI_SUM".
func (o Op) String() string {
	switch o {
	case Sum:
		return "MPI_SUM"
	case Max:
		return "MPI_MAX"
	case Min:
		return "MPI_MIN"
	case Prod:
		return "MPI_PROD"
	case BAnd:
		return "MPI_BAND"
	case BOr:
		return "MPI_BOR"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// AllreduceInt64 combines send element-wise over all ranks of c with op and
// stores the result in recv on every rank (MPI_Allreduce on MPI_INT64_T).
// len(send) must equal len(recv) and be the same on every rank. send and
// recv may be the same slice (in place) but must not overlap otherwise.
// Slices longer than the chunk limit are reduced in pieces.
func (c *Comm) AllreduceInt64(send, recv []int64, op Op) error {
	return allreduce(c, send, recv, op, C.m2n_int64())
}

// AllreduceFloat64 is AllreduceInt64 for float64 (MPI_DOUBLE). op must be
// Sum, Max, Min or Prod.
func (c *Comm) AllreduceFloat64(send, recv []float64, op Op) error {
	return allreduce(c, send, recv, op, C.m2n_double())
}

func allreduce[T int64 | float64](c *Comm, send, recv []T, op Op, dt C.MPI_Datatype) error {
	const name = "MPI_Allreduce"
	h, err := c.handle(name)
	if err != nil {
		return err
	}
	if len(send) != len(recv) {
		return invalid(name, "len(send) = %d, len(recv) = %d", len(send), len(recv))
	}
	if op < Sum || op > BOr {
		return invalid(name, "unknown Op %d", int(op))
	}
	const size = 8
	perChunk := max(1, chunkBytes/size)
	var inPlace C.int
	if len(send) > 0 && &send[0] == &recv[0] {
		inPlace = 1
	}
	off := 0
	for {
		n := min(len(send)-off, perChunk)
		var sp, rp unsafe.Pointer
		if n > 0 {
			rp = unsafe.Pointer(&recv[off])
			if inPlace == 0 {
				sp = unsafe.Pointer(&send[off])
			}
		}
		if err := check(name, C.m2n_allreduce(sp, rp, C.int(n), dt, C.int(op), h, inPlace)); err != nil {
			return err
		}
		off += n
		if off >= len(send) {
			return nil
		}
	}
}
