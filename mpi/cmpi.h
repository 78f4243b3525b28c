// cmpi.h wraps the MPI handles and constants that are macros in some MPI
// implementations (OpenMPI defines MPI_COMM_WORLD as the address of a global),
// so that cgo sees plain functions. Every function here is a one-liner; the
// contracts live in the Go files.
//
// MPI's sentinel addresses that are not real pointers (MPI_IN_PLACE is
// (void *)1 in OpenMPI, MPI_STATUS_IGNORE is (MPI_Status *)1 in MPICH) never
// cross into Go: a Go pointer variable holding one is fatal when the runtime
// moves the stack ("invalid pointer found on stack"). Go passes a flag and
// the wrappers below substitute the sentinel in C.

#ifndef M2N_CMPI_H
#define M2N_CMPI_H

#include <mpi.h>

static inline MPI_Comm m2n_comm_world(void) { return MPI_COMM_WORLD; }
static inline MPI_Comm m2n_comm_self(void) { return MPI_COMM_SELF; }
static inline MPI_Comm m2n_comm_null(void) { return MPI_COMM_NULL; }
static inline MPI_Request m2n_request_null(void) { return MPI_REQUEST_NULL; }
static inline MPI_Datatype m2n_byte(void) { return MPI_BYTE; }

// m2n_allgather is MPI_Allgather on bytes; in_place != 0 passes MPI_IN_PLACE
// for send (the rank's block of recv is its contribution).
static inline int m2n_allgather(const void *send, int count, void *recv, MPI_Comm c, int in_place) {
	if (in_place) {
		return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, MPI_BYTE, c);
	}
	return MPI_Allgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, c);
}

// m2n_comm_f2c and m2n_comm_c2f convert between a communicator and its
// Fortran handle (MPI_Fint, an int in OpenMPI and MPICH), the integer that
// mpi4py's Comm.py2f() returns. OpenMPI answers a handle it does not know
// with a null pointer, which m2n_comm_f2c turns into MPI_COMM_NULL.
static inline MPI_Comm m2n_comm_f2c(int f) {
	MPI_Comm c = MPI_Comm_f2c((MPI_Fint)f);
#ifdef OPEN_MPI
	if (c == NULL) {
		return MPI_COMM_NULL;
	}
#endif
	return c;
}
static inline int m2n_comm_c2f(MPI_Comm c) { return (int)MPI_Comm_c2f(c); }

static inline int m2n_errors_return(MPI_Comm c) {
	return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
}

static inline int m2n_split_shared(MPI_Comm c, int key, MPI_Comm *out) {
	return MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
}

#endif
