package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/session"
)

// linkStart is what m2n_session_listen and m2n_session_connect check
// before they reach the other job: MPI's state, the communicator and the
// options, agreed by every rank of this job (bounded).
func linkStart(name string, comm C.int32_t, o *C.m2n_options, path *C.char, out *C.m2n_session) (*mpi.Comm, session.Options, string, error) {
	var opts session.Options
	if out == nil {
		return nil, opts, "", invalidf("%s: out is NULL", name)
	}
	*out = 0
	if path == nil {
		return nil, opts, "", invalidf("%s: path is NULL", name)
	}
	if !mpi.Initialized() || mpi.Finalized() {
		return nil, opts, "", invalidf("%s: MPI is not initialised (or already finalised): initialise it first, with MPI_THREAD_MULTIPLE", name)
	}
	c, err := mpi.FromFortran(int(comm))
	if err != nil {
		return nil, opts, "", invalidf("%s: communicator %d: %v", name, comm, err)
	}
	if lvl, err := mpi.QueryThread(); err != nil || lvl < mpi.ThreadMultiple {
		return nil, opts, "", invalidf("%s: rank %d: MPI was initialised with %v (%v); m2n needs MPI_THREAD_MULTIPLE", name, c.Rank(), lvl, err)
	}
	opts, optErr := optionsOf(o)
	if optErr != nil {
		optErr = fmt.Errorf("%s: %w", rankName(c), optErr)
	}
	if err := agreeToJoin(c, opts.Timeout, optErr); err != nil {
		return nil, opts, "", err
	}
	return c, opts, C.GoString(path), nil
}

//export m2n_session_listen
func m2n_session_listen(comm C.int32_t, o *C.m2n_options, path *C.char, out *C.m2n_session) (rc C.int) {
	defer recovered(&rc)
	c, opts, p, err := linkStart("m2n_session_listen", comm, o, path, out)
	if err != nil {
		return result(err)
	}
	l, err := session.Listen(c, p, opts)
	if err != nil {
		return result(err)
	}
	s, err := l.Accept()
	if err = errors.Join(err, l.Close()); err != nil {
		if s != nil {
			s.Close()
		}
		return result(err)
	}
	*out = C.m2n_session(register(&sessionEntry{s: s, calls: map[uint64]*callEntry{}, models: map[uint64]*modelEntry{}}))
	return C.M2N_OK
}

//export m2n_session_connect
func m2n_session_connect(comm C.int32_t, o *C.m2n_options, path *C.char, out *C.m2n_session) (rc C.int) {
	defer recovered(&rc)
	c, opts, p, err := linkStart("m2n_session_connect", comm, o, path, out)
	if err != nil {
		return result(err)
	}
	s, err := session.Connect(c, p, opts)
	if err != nil {
		return result(err)
	}
	*out = C.m2n_session(register(&sessionEntry{s: s, calls: map[uint64]*callEntry{}, models: map[uint64]*modelEntry{}}))
	return C.M2N_OK
}
