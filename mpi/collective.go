package mpi

/*
#include "cmpi.h"
*/
import "C"

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

// bcastBlocks implements Allgather for large totals: each rank's block is
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
