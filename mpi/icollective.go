package mpi

/*
#include "cmpi.h"
*/
import "C"

// Iallgather starts an allgather over c (MPI_Iallgather) and returns at
// once: recv[r*len(send) : (r+1)*len(send)] receives rank r's send once the
// returned Request completes. Every rank must pass a send of the same
// length and a recv of c.Size()*len(send) bytes, distinct from send; both
// stay pinned and must not be touched until the Request completes. It
// serves small control messages: the total must fit one MPI call (the
// chunk limit, 1 GiB), or it returns an error wrapping ErrInvalid. Poll the
// Request with Test to bound the wait (package session does).
func (c *Comm) Iallgather(send, recv []byte) (*Request, error) {
	const op = "MPI_Iallgather"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	n := len(send)
	if len(recv) != c.Size()*n {
		return nil, invalid(op, "len(recv) = %d, want Size()*len(send) = %d*%d", len(recv), c.Size(), n)
	}
	if len(recv) > chunkBytes {
		return nil, invalid(op, "%d bytes in all, more than one call carries (%d)", len(recv), chunkBytes)
	}
	r := &Request{}
	r.pinAll(send, recv)
	var q C.MPI_Request
	if err := check(op, C.MPI_Iallgather(at(send, 0), C.int(n), C.m2n_byte(), at(recv, 0), C.int(n), C.m2n_byte(), h, &q)); err != nil {
		r.abandon()
		return nil, err
	}
	r.h = []C.MPI_Request{q}
	return r, nil
}

// Iallgatherv starts an allgatherv over c (MPI_Iallgatherv): rank r's send
// lands at recv[displs[r] : displs[r]+counts[r]] once the Request
// completes. counts must be the same on every rank, len(send) must be
// counts[c.Rank()], every block must lie inside recv, and the blocks must
// not overlap each other or send. The whole of recv must fit one MPI call
// (1 GiB). The buffers stay pinned until the Request completes.
func (c *Comm) Iallgatherv(send, recv []byte, counts, displs []int64) (*Request, error) {
	const op = "MPI_Iallgatherv"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	size, rank := c.Size(), c.Rank()
	if len(counts) != size || len(displs) != size {
		return nil, invalid(op, "len(counts) = %d and len(displs) = %d, want Size() = %d", len(counts), len(displs), size)
	}
	if len(recv) > chunkBytes {
		return nil, invalid(op, "a receive buffer of %d bytes, more than one call carries (%d)", len(recv), chunkBytes)
	}
	for r := range size {
		n, d := counts[r], displs[r]
		if n < 0 || d < 0 || d > int64(len(recv)) || n > int64(len(recv))-d {
			return nil, invalid(op, "rank %d's block [%d, %d+%d) is not inside recv of length %d", r, d, d, n, len(recv))
		}
	}
	if int64(len(send)) != counts[rank] {
		return nil, invalid(op, "len(send) = %d, want counts[%d] = %d", len(send), rank, counts[rank])
	}
	// MPI reads counts and displacements until the operation completes:
	// they live in memory the Request keeps pinned.
	cc := make([]C.int, size)
	cd := make([]C.int, size)
	for r := range size {
		cc[r], cd[r] = C.int(counts[r]), C.int(displs[r])
	}
	r := &Request{keep: [][]C.int{cc, cd}}
	r.pin.Pin(&cc[0])
	r.pin.Pin(&cd[0])
	r.hold()
	r.pinAll(send, recv)
	var q C.MPI_Request
	if err := check(op, C.MPI_Iallgatherv(at(send, 0), C.int(len(send)), C.m2n_byte(), at(recv, 0), &cc[0], &cd[0], C.m2n_byte(), h, &q)); err != nil {
		r.abandon()
		return nil, err
	}
	r.h = []C.MPI_Request{q}
	return r, nil
}

// pinAll pins every non-empty buffer for the life of the request; a
// request with anything pinned is held (and counts once in Live).
func (r *Request) pinAll(bufs ...[]byte) {
	for _, b := range bufs {
		if len(b) > 0 {
			r.pin.Pin(&b[0])
			r.hold()
		}
	}
}
