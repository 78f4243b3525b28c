// cmpi.h wraps the MPI handles and constants that are macros in some MPI
// implementations (OpenMPI defines MPI_COMM_WORLD as the address of a global),
// so that cgo sees plain functions. Every function here is a one-liner; the
// contracts live in the Go files.

#ifndef M2N_CMPI_H
#define M2N_CMPI_H

#include <mpi.h>

static inline MPI_Comm m2n_comm_world(void) { return MPI_COMM_WORLD; }
static inline MPI_Comm m2n_comm_self(void) { return MPI_COMM_SELF; }
static inline MPI_Comm m2n_comm_null(void) { return MPI_COMM_NULL; }
static inline MPI_Request m2n_request_null(void) { return MPI_REQUEST_NULL; }
static inline MPI_Datatype m2n_byte(void) { return MPI_BYTE; }
static inline MPI_Datatype m2n_int64(void) { return MPI_INT64_T; }
static inline MPI_Datatype m2n_double(void) { return MPI_DOUBLE; }
static inline void *m2n_in_place(void) { return MPI_IN_PLACE; }
static inline MPI_Status *m2n_status_ignore(void) { return MPI_STATUS_IGNORE; }

// m2n_op maps the Go Op values (see op.go) to MPI operations.
static inline MPI_Op m2n_op(int k) {
	switch (k) {
	case 0: return MPI_SUM;
	case 1: return MPI_MAX;
	case 2: return MPI_MIN;
	case 3: return MPI_PROD;
	case 4: return MPI_BAND;
	case 5: return MPI_BOR;
	}
	return MPI_OP_NULL;
}

static inline int m2n_errors_return(MPI_Comm c) {
	return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
}

static inline int m2n_split_shared(MPI_Comm c, int key, MPI_Comm *out) {
	return MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
}

#endif
