package mpi

/*
#include "cmpi.h"
*/
import "C"

// Cancel withdraws a pending receive (MPI_Cancel, then a local wait).
// Temporary: replaced by the binding's full version.
func (r *Request) Cancel() (cancelled bool, err error) {
	if r == nil || len(r.h) == 0 {
		return false, nil
	}
	null := C.m2n_request_null()
	for i := range r.h {
		if r.h[i] != null {
			C.MPI_Cancel(&r.h[i])
		}
	}
	st := make([]C.MPI_Status, len(r.h))
	rc := C.MPI_Waitall(C.int(len(r.h)), &r.h[0], &st[0])
	r.settle()
	return true, statusError("MPI_Waitall", rc, st)
}
