package mpi

/*
#include "cmpi.h"
*/
import "C"

import "math"

// undefined is the color that makes Split return a nil *Comm: the calling
// rank takes part in the split but joins no new communicator
// (MPI_UNDEFINED).
const undefined = -1

// Comm is an MPI communicator (MPI_Comm): a group of ranks and a private
// context for their messages. World returns the communicator of all ranks;
// Split, SplitShared and Dup derive new ones, which the caller owns and must
// release with Free before Finalize.
//
// Every communicator this package returns has MPI_ERRORS_RETURN set, so its
// failing calls return an error naming the MPI call. A Comm's methods are safe for concurrent
// use only as far as the thread level that Init provided allows; see the
// package documentation.
type Comm struct {
	h     C.MPI_Comm
	world bool
	// borrowed: the communicator belongs to the code that made it (World,
	// or one wrapped with FromFortran) and is never freed here.
	borrowed bool
}

var world = &Comm{h: C.m2n_comm_world(), world: true, borrowed: true}

// World returns the communicator of all ranks of the job (MPI_COMM_WORLD).
// It is only usable between Init and Finalize, and must not be freed.
func World() *Comm { return world }

// FromFortran wraps a communicator that other code made, given by its
// Fortran handle (MPI_Comm_f2c): the integer that mpi4py's Comm.py2f()
// returns, or MPI_Comm_c2f of a C handle. It is how a library loaded into a
// process whose MPI someone else initialised (Python with mpi4py, a C
// program) works on that program's communicators: MPI must already be
// initialised (Init refuses a second initialisation, and this package
// never needs one of its own), and not finalised.
//
// The Comm borrows the communicator: Free refuses it (its owner frees
// it), and its error handler is left as the owner set it (mpi4py sets
// MPI_ERRORS_RETURN; MPI's default, MPI_ERRORS_ARE_FATAL, ends the job on
// an error). Communicators derived from it (Dup, Split) are this
// package's as usual, with MPI_ERRORS_RETURN. A handle that names no
// communicator, or MPI_COMM_NULL's, is an error wrapping ErrInvalid.
func FromFortran(f int) (*Comm, error) {
	if !Initialized() {
		return nil, invalid("MPI_Comm_f2c", "MPI is not initialised: the program (mpi4py, or MPI_Init_thread) must initialise it first")
	}
	if Finalized() {
		return nil, invalid("MPI_Comm_f2c", "MPI is already finalised")
	}
	if f < math.MinInt32 || f > math.MaxInt32 {
		return nil, invalid("MPI_Comm_f2c", "Fortran handle %d is not an MPI_Fint", f)
	}
	h := C.m2n_comm_f2c(C.int(f))
	if h == C.m2n_comm_null() {
		return nil, invalid("MPI_Comm_f2c", "Fortran handle %d names no communicator (or MPI_COMM_NULL)", f)
	}
	if h == C.m2n_comm_world() {
		return world, nil
	}
	return &Comm{h: h, borrowed: true}, nil
}

// fortran returns c's Fortran handle (MPI_Comm_c2f), the integer that
// FromFortran and mpi4py's Comm.f2py take.
func (c *Comm) fortran() (int, error) {
	h, err := c.handle("MPI_Comm_c2f")
	if err != nil {
		return 0, err
	}
	return int(C.m2n_comm_c2f(h)), nil
}

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
// It panics with an error naming the MPI call if MPI fails, which only happens when c is nil or
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

// Size returns the number of ranks in c. It panics with an error naming the MPI call if MPI
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
// -1 (MPI_UNDEFINED) gets a nil *Comm and a nil error.
func (c *Comm) Split(color, key int) (*Comm, error) {
	h, err := c.handle("MPI_Comm_split")
	if err != nil {
		return nil, err
	}
	col := C.int(color)
	if color == undefined {
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
// returns nil, so the result of a Split with color -1 can be freed
// unconditionally. Freeing World, or a communicator from FromFortran,
// returns an error wrapping ErrInvalid.
func (c *Comm) Free() error {
	if c == nil {
		return nil
	}
	if c.world {
		return invalid("MPI_Comm_free", "the world communicator cannot be freed")
	}
	if c.borrowed {
		return invalid("MPI_Comm_free", "the communicator is borrowed (FromFortran): its owner frees it")
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
