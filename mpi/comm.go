package mpi

/*
#include "cmpi.h"
*/
import "C"

// Undefined is the color that makes Split return a nil *Comm: the calling
// rank takes part in the split but joins no new communicator
// (MPI_UNDEFINED).
const Undefined = -1

// Comm is an MPI communicator (MPI_Comm): a group of ranks and a private
// context for their messages. World returns the communicator of all ranks;
// Split, SplitShared and Dup derive new ones, which the caller owns and must
// release with Free before Finalize.
//
// Every communicator this package returns has MPI_ERRORS_RETURN set, so its
// failing calls return an *Error. A Comm's methods are safe for concurrent
// use only as far as the thread level that Init provided allows; see the
// package documentation.
type Comm struct {
	h     C.MPI_Comm
	world bool
}

var world = &Comm{h: C.m2n_comm_world(), world: true}

// World returns the communicator of all ranks of the job (MPI_COMM_WORLD).
// It is only usable between Init and Finalize, and must not be freed.
func World() *Comm { return world }

// newComm wraps a communicator that MPI just created, making its errors
// return. A null handle gives a nil *Comm.
func newComm(h C.MPI_Comm) (*Comm, error) {
	if h == C.m2n_comm_null() {
		return nil, nil
	}
	if err := check("MPI_Comm_set_errhandler", C.m2n_errors_return(h)); err != nil {
		C.MPI_Comm_free(&h)
		return nil, err
	}
	live.comms.Add(1)
	return &Comm{h: h}, nil
}

// handle returns c's MPI handle, or an error wrapping ErrInvalid when c is
// nil or freed.
func (c *Comm) handle(op string) (C.MPI_Comm, error) {
	if c == nil || c.h == C.m2n_comm_null() {
		return C.m2n_comm_null(), invalid(op, "nil or freed communicator")
	}
	return c.h, nil
}

// Rank returns the calling process's rank in c, in [0, c.Size()).
// It panics with an *Error if MPI fails, which only happens when c is nil or
// freed or MPI is not initialized.
func (c *Comm) Rank() int {
	h, err := c.handle("MPI_Comm_rank")
	if err != nil {
		panic(err)
	}
	var r C.int
	if err := check("MPI_Comm_rank", C.MPI_Comm_rank(h, &r)); err != nil {
		panic(err)
	}
	return int(r)
}

// Size returns the number of ranks in c. It panics with an *Error if MPI
// fails, which only happens when c is nil or freed or MPI is not
// initialized.
func (c *Comm) Size() int {
	h, err := c.handle("MPI_Comm_size")
	if err != nil {
		panic(err)
	}
	var n C.int
	if err := check("MPI_Comm_size", C.MPI_Comm_size(h, &n)); err != nil {
		panic(err)
	}
	return int(n)
}

// Split partitions c by color (MPI_Comm_split): ranks that pass the same
// non-negative color form one new communicator, ordered by key and then by
// their rank in c. It is collective over c. A rank that passes color
// Undefined gets a nil *Comm and a nil error.
func (c *Comm) Split(color, key int) (*Comm, error) {
	h, err := c.handle("MPI_Comm_split")
	if err != nil {
		return nil, err
	}
	col := C.int(color)
	if color == Undefined {
		col = C.MPI_UNDEFINED
	}
	var out C.MPI_Comm
	if err := check("MPI_Comm_split", C.MPI_Comm_split(h, col, C.int(key), &out)); err != nil {
		return nil, err
	}
	return newComm(out)
}

// SplitShared partitions c into communicators of ranks that can share memory,
// that is, one per host (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED),
// ordered by key and then by rank in c. It is collective over c.
func (c *Comm) SplitShared(key int) (*Comm, error) {
	h, err := c.handle("MPI_Comm_split_type")
	if err != nil {
		return nil, err
	}
	var out C.MPI_Comm
	if err := check("MPI_Comm_split_type", C.m2n_split_shared(h, C.int(key), &out)); err != nil {
		return nil, err
	}
	return newComm(out)
}

// Dup returns a new communicator with the same ranks as c and a separate
// message context (MPI_Comm_dup), so that its traffic never matches c's. It
// is collective over c.
func (c *Comm) Dup() (*Comm, error) {
	h, err := c.handle("MPI_Comm_dup")
	if err != nil {
		return nil, err
	}
	var out C.MPI_Comm
	if err := check("MPI_Comm_dup", C.MPI_Comm_dup(h, &out)); err != nil {
		return nil, err
	}
	return newComm(out)
}

// Free releases a communicator returned by Split, SplitShared or Dup
// (MPI_Comm_free); it is collective over c. Afterwards c's methods return
// errors wrapping ErrInvalid (Rank and Size panic). Free on a nil *Comm
// returns nil, so the result of a Split with color Undefined can be freed
// unconditionally. Freeing World returns an error wrapping ErrInvalid.
func (c *Comm) Free() error {
	if c == nil {
		return nil
	}
	if c.world {
		return invalid("MPI_Comm_free", "the world communicator cannot be freed")
	}
	h, err := c.handle("MPI_Comm_free")
	if err != nil {
		return err
	}
	if err := check("MPI_Comm_free", C.MPI_Comm_free(&h)); err != nil {
		return err
	}
	c.h = C.m2n_comm_null()
	live.comms.Add(-1)
	return nil
}

// Abort terminates the job with exit code code (MPI_Abort on c); it does
// not return. See the package-level Abort.
func (c *Comm) Abort(code int) { Abort(c, code) }
