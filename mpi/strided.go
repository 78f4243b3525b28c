package mpi

/*
#include "cmpi.h"

// m2n_strided_type builds the datatype of n nested outer dims (counts and
// byte strides, outermost first) over a contiguous run of bytes, and commits
// it. On error it frees what it made.
static int m2n_strided_type(int run, int n, const long long *counts, const long long *strides, MPI_Datatype *out) {
	MPI_Datatype t, next;
	int rc = MPI_Type_contiguous(run, MPI_BYTE, &t);
	if (rc != MPI_SUCCESS) return rc;
	for (int i = n - 1; i >= 0; i--) {
		rc = MPI_Type_create_hvector((int)counts[i], 1, (MPI_Aint)strides[i], t, &next);
		MPI_Type_free(&t);
		if (rc != MPI_SUCCESS) return rc;
		t = next;
	}
	rc = MPI_Type_commit(&t);
	if (rc != MPI_SUCCESS) {
		MPI_Type_free(&t);
		return rc;
	}
	*out = t;
	return MPI_SUCCESS;
}
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/m2n-dev/m2n/strided"
)

// maxStridedBytes is the largest region isendStrided and irecvStrided move
// in one message (MPI counts are C ints).
const maxStridedBytes = math.MaxInt32

// isendStrided sends the region at of buf to dest as one message, with no
// copy on this side: MPI reads the runs in place through a derived datatype
// (a contiguous run inside nested hvectors). The receiver may receive it
// with Irecv into contiguous memory or with irecvStrided into any region of
// the same size. buf stays pinned until the request completes.
//
// Errors: a region outside buf, or larger than maxStridedBytes, wraps
// ErrInvalid; MPI's errors return an error naming the MPI call.
func (c *Comm) isendStrided(buf []byte, at strided.Desc, dest, tag int) (*Request, error) {
	return c.strided("MPI_Isend", buf, at, dest, tag)
}

// irecvStrided receives one message from src into the region at of buf, in
// place. The message must hold exactly the region's bytes.
func (c *Comm) irecvStrided(buf []byte, at strided.Desc, src, tag int) (*Request, error) {
	return c.strided("MPI_Irecv", buf, at, src, tag)
}

func (c *Comm) strided(op string, buf []byte, at strided.Desc, peer, tag int) (*Request, error) {
	h, p, tg, err := c.pointArgs(op, peer, tag)
	if err != nil {
		return nil, err
	}
	if err := checkShape(op, at); err != nil {
		return nil, err
	}
	if err := checkFits(op, at, len(buf)); err != nil {
		return nil, err
	}
	var dt C.MPI_Datatype
	if err := makeType(&at, &dt); err != nil {
		return nil, err
	}
	// MPI keeps a datatype alive until the operations that use it end.
	defer C.MPI_Type_free(&dt)
	return postOne(op, buf, at.Offset, dt, p, tg, h)
}

// pointArgs checks a point-to-point operation's communicator, peer and tag
// (no wildcards) and returns them as MPI takes them.
func (c *Comm) pointArgs(op string, peer, tag int) (h C.MPI_Comm, p, tg C.int, err error) {
	if h, err = c.handle(op); err != nil {
		return h, 0, 0, err
	}
	if p, err = peerArg(op, peer, false); err != nil {
		return h, 0, 0, err
	}
	tg, err = tagArg(op, tag, false)
	return h, p, tg, err
}

// checkShape checks that at's shape (its run, counts and strides) makes a
// datatype MPI can take: counts are C ints.
func checkShape(op string, at strided.Desc) error {
	if len(at.Count) != len(at.Stride) {
		return invalid(op, "%d counts and %d strides", len(at.Count), len(at.Stride))
	}
	if at.Run <= 0 || at.Run > maxStridedBytes || at.Bytes() > maxStridedBytes {
		return invalid(op, "a strided region of %d bytes in runs of %d; want 1 to %d", at.Bytes(), at.Run, maxStridedBytes)
	}
	for i, n := range at.Count {
		if n < 1 || n > maxStridedBytes || at.Stride[i] < 0 {
			return invalid(op, "outer dim %d: count %d, stride %d", i, n, at.Stride[i])
		}
	}
	return nil
}

// checkFits checks that the region at (of a checked shape) lies inside a
// buffer of n bytes.
func checkFits(op string, at strided.Desc, n int) error {
	last := at.Offset
	for i, c := range at.Count {
		last += (c - 1) * at.Stride[i]
	}
	if at.Offset < 0 || last+at.Run > int64(n) {
		return invalid(op, "strided region reaches byte %d of a %d-byte buffer", last+at.Run, n)
	}
	return nil
}

// makeType builds and commits the datatype of at's shape into dt.
func makeType(at *strided.Desc, dt *C.MPI_Datatype) error {
	var counts, strides *C.longlong
	if len(at.Count) > 0 {
		counts = (*C.longlong)(unsafe.Pointer(&at.Count[0]))
		strides = (*C.longlong)(unsafe.Pointer(&at.Stride[0]))
	}
	return check("MPI_Type_create_hvector", C.m2n_strided_type(C.int(at.Run), C.int(len(at.Count)), counts, strides, dt))
}
