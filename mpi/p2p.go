package mpi

/*
#include "cmpi.h"
*/
import "C"

import "unsafe"

// AnySource, passed as the source of Irecv, matches a message from
// any rank (MPI_ANY_SOURCE).
const AnySource = -1

// anyTag, passed as the tag of Irecv, matches a message with any tag
// (MPI_ANY_TAG).
const anyTag = -1

// peerArg validates a destination or source rank and maps AnySource.
func peerArg(op string, rank int, wildcard bool) (C.int, error) {
	if wildcard && rank == AnySource {
		return C.MPI_ANY_SOURCE, nil
	}
	if rank < 0 {
		return 0, invalid(op, "negative rank %d", rank)
	}
	return C.int(rank), nil
}

// tagArg validates a tag and maps anyTag. MPI checks the upper bound
// (MPI_TAG_UB, at least 32767).
func tagArg(op string, tag int, wildcard bool) (C.int, error) {
	if wildcard && tag == anyTag {
		return C.MPI_ANY_TAG, nil
	}
	if tag < 0 {
		return 0, invalid(op, "negative tag %d", tag)
	}
	return C.int(tag), nil
}

// Isend starts sending buf to rank dest of c with tag tag (MPI_Isend) and
// returns at once. buf is pinned and must not be modified until the
// returned Request completes.
//
// A buf longer than the chunk limit (1 GiB) goes as several messages of at
// most that size with the same (dest, tag); the receiver must post a
// matching receive of exactly len(buf) bytes with Irecv, which splits
// identically. MPI keeps messages between one pair of ranks on one
// communicator and tag in order, so the pieces cannot cross. An empty buf is
// one message of 0 bytes.
//
// Errors: a negative dest or tag wraps ErrInvalid; MPI's own checks (a dest
// not in c, a tag above MPI_TAG_UB) return an error naming "MPI_Isend".
func (c *Comm) Isend(buf []byte, dest, tag int) (*Request, error) {
	const op = "MPI_Isend"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	d, err := peerArg(op, dest, false)
	if err != nil {
		return nil, err
	}
	tg, err := tagArg(op, tag, false)
	if err != nil {
		return nil, err
	}
	return postChunks(op, buf, func(p unsafe.Pointer, n C.int, q *C.MPI_Request) C.int {
		return C.MPI_Isend(p, n, C.m2n_byte(), d, tg, h, q)
	})
}

// Irecv starts receiving a message from rank src of c with tag tag into buf
// (MPI_Irecv) and returns at once. buf is pinned and must not be read or
// modified until the returned Request completes. Once it has, its Status
// says which rank sent the message, with which tag, and how many bytes
// arrived; a receive nothing matched yet can be withdrawn with Cancel.
//
// A buf of at most the chunk limit (1 GiB) is one message, which may be
// shorter than buf (it fills the start of buf, and Status.Bytes says how
// much) but not longer (MPI_ERR_TRUNCATE). A longer buf is received as
// several messages, as Isend sends it, and the sender must send exactly
// len(buf) bytes. src may be AnySource and tag AnyTag only when buf fits in
// one message: otherwise the pieces of different messages could
// interleave, and Irecv returns an error wrapping ErrInvalid.
//
// Errors: a negative src or tag that is not a wildcard wraps ErrInvalid;
// MPI's own checks return an error naming "MPI_Irecv".
func (c *Comm) Irecv(buf []byte, src, tag int) (*Request, error) {
	const op = "MPI_Irecv"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	s, err := peerArg(op, src, true)
	if err != nil {
		return nil, err
	}
	tg, err := tagArg(op, tag, true)
	if err != nil {
		return nil, err
	}
	if (src == AnySource || tag == anyTag) && numChunks(len(buf)) > 1 {
		return nil, invalid(op, "AnySource or AnyTag with a %d-byte buffer, which is more than one message of at most %d bytes", len(buf), chunkBytes)
	}
	return postChunks(op, buf, func(p unsafe.Pointer, n C.int, q *C.MPI_Request) C.int {
		return C.MPI_Irecv(p, n, C.m2n_byte(), s, tg, h, q)
	})
}

// postChunks starts one nonblocking operation per chunk of buf with start
// and returns them as one Request that keeps buf pinned. If a chunk fails to
// start, the chunks already in flight are abandoned (see Request.abandon).
func postChunks(op string, buf []byte, start func(p unsafe.Pointer, n C.int, q *C.MPI_Request) C.int) (*Request, error) {
	r := newRequest(numChunks(len(buf)), op == "MPI_Irecv")
	r.pinBuf(buf)
	err := forChunks(len(buf), func(off, n int) error {
		var q C.MPI_Request
		if err := check(op, start(at(buf, off), C.int(n), &q)); err != nil {
			return err
		}
		r.h = append(r.h, q)
		return nil
	})
	if err != nil {
		r.abandon()
		return nil, err
	}
	return r, nil
}
