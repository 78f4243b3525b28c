package mpi

/*
#include "cmpi.h"
*/
import "C"

import (
	"unsafe"

	"github.com/m2n-dev/m2n/strided"
)

// Datatype is a committed MPI derived datatype that describes the shape of
// a strided region (a strided.Desc without its offset): a contiguous run of
// bytes inside nested hvectors, as isendStrided builds per call. Making
// one costs a few MPI calls (MPI_Type_contiguous, one
// MPI_Type_create_hvector per outer dim, MPI_Type_commit), so a program
// that moves the same region every step makes its datatype once and posts
// it with IsendType and IrecvType; Free releases it (MPI keeps it alive
// until the operations that use it end).
type Datatype struct {
	h     C.MPI_Datatype
	shape strided.Desc // Offset 0
	freed bool
}

// NewDatatype builds and commits the datatype of at's shape (its offset is
// given when posting).
//
// Errors: a region larger than maxStridedBytes (MPI counts are C ints), a
// run or count below 1, or a negative stride wraps ErrInvalid; MPI's
// errors return an error naming the MPI call.
func NewDatatype(at strided.Desc) (*Datatype, error) {
	const op = "MPI_Type_create_hvector"
	shape := strided.Desc{Run: at.Run, Count: append([]int64(nil), at.Count...), Stride: append([]int64(nil), at.Stride...)}
	if err := checkShape(op, shape); err != nil {
		return nil, err
	}
	var h C.MPI_Datatype // not &d.h: d holds Go pointers, which cgo must not see
	if err := makeType(&shape, &h); err != nil {
		return nil, err
	}
	return &Datatype{h: h, shape: shape}, nil
}

// Free releases the datatype (MPI_Type_free). Operations already posted
// with it complete normally. Free on a freed or nil Datatype does nothing.
func (d *Datatype) Free() error {
	if d == nil || d.freed {
		return nil
	}
	d.freed = true
	h := d.h
	return check("MPI_Type_free", C.MPI_Type_free(&h))
}

// IsendType sends the region of buf at offset off with shape d to dest as
// one message, in place (MPI_Isend of one d). buf is pinned until the
// request completes. The receiver may receive it into contiguous memory
// (Irecv of exactly d.Bytes()) or into any region of the same size.
//
// Errors: a freed d, or a region reaching past buf, wraps ErrInvalid; MPI's
// errors return an error naming "MPI_Isend".
func (c *Comm) IsendType(buf []byte, off int64, d *Datatype, dest, tag int) (*Request, error) {
	return c.postType("MPI_Isend", buf, off, d, dest, tag)
}

// IrecvType receives one message from src into the region of buf at
// offset off with shape d, in place; the message must hold exactly
// d.Bytes() bytes.
func (c *Comm) IrecvType(buf []byte, off int64, d *Datatype, src, tag int) (*Request, error) {
	return c.postType("MPI_Irecv", buf, off, d, src, tag)
}

func (c *Comm) postType(op string, buf []byte, off int64, d *Datatype, peer, tag int) (*Request, error) {
	h, p, tg, err := c.pointArgs(op, peer, tag)
	if err != nil {
		return nil, err
	}
	if d == nil || d.freed {
		return nil, invalid(op, "a nil or freed datatype")
	}
	at := d.shape
	at.Offset = off
	if err := checkFits(op, at, len(buf)); err != nil {
		return nil, err
	}
	return postOne(op, buf, off, d.h, p, tg, h)
}

// postOne posts one MPI_Isend or MPI_Irecv of one dt at buf[off], buf
// pinned until the request completes.
func postOne(op string, buf []byte, off int64, dt C.MPI_Datatype, p, tg C.int, h C.MPI_Comm) (*Request, error) {
	r := newRequest(1, op == "MPI_Irecv")
	r.h = r.h[:1]
	r.pinBuf(buf)
	base := unsafe.Pointer(&buf[off])
	var rc C.int
	if op == "MPI_Isend" {
		rc = C.MPI_Isend(base, 1, dt, p, tg, h, &r.h[0])
	} else {
		rc = C.MPI_Irecv(base, 1, dt, p, tg, h, &r.h[0])
	}
	if err := check(op, rc); err != nil {
		r.h = nil
		r.release()
		return nil, err
	}
	return r, nil
}

// Testall reports whether every request in reqs has completed (one
// MPI_Testall over all of them, which drives MPI's progress), unpinning
// their buffers if so; nil entries are skipped.
func Testall(reqs []*Request) (bool, error) { return testall(reqs) }
