package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/session"
)

// sessionEntry is a session behind a handle. Its mutex serialises
// everything done on the session, its calls and its models (a Session's
// methods are called from one goroutine).
type sessionEntry struct {
	mu     sync.Mutex
	s      *session.Session
	calls  map[uint64]*callEntry
	models map[uint64]*modelEntry
}

func sessionOf(h C.m2n_session) (*sessionEntry, error) {
	return lookup[*sessionEntry](uint64(h), "session")
}

// optionsV1 is the size of the first m2n_options (ABI version 1).
const optionsV1 = C.sizeof_m2n_options

//export m2n_options_init
func m2n_options_init(o *C.m2n_options) {
	defer func() { _ = recover() }()
	if o == nil {
		return
	}
	*o = C.m2n_options{}
	o.struct_size = C.uint32_t(optionsV1)
	o.device = C.M2N_DEVICE_CPU
	o.cuda_device = C.M2N_CUDA_DEVICE_LOCAL_RANK
}

// optionsOf reads m2n_options (nil: the defaults) into session options.
func optionsOf(o *C.m2n_options) (session.Options, error) {
	var opts session.Options
	if o == nil {
		return opts, nil
	}
	if o.struct_size != C.uint32_t(optionsV1) {
		return opts, invalidf("options: struct_size %d, want %d (this library's m2n_options; call m2n_options_init)", o.struct_size, optionsV1)
	}
	switch o.device {
	case C.M2N_DEVICE_CPU:
		opts.Device = session.CPU
	case C.M2N_DEVICE_CUDA:
		opts.Device = session.GPU
		switch ord := int(o.cuda_device); {
		case ord >= 0:
			opts.GPU = func(int) int { return ord }
		case ord != C.M2N_CUDA_DEVICE_LOCAL_RANK:
			return opts, invalidf("options: cuda_device %d: want a GPU ordinal or M2N_CUDA_DEVICE_LOCAL_RANK (-1)", ord)
		}
	default:
		return opts, invalidf("options: device %d: want M2N_DEVICE_CPU (0) or M2N_DEVICE_CUDA (1)", o.device)
	}
	t := float64(o.timeout_seconds)
	if t < 0 || t > float64(1<<62)/1e9 {
		return opts, invalidf("options: timeout_seconds %v: want 0 (the default, 300) or more", t)
	}
	opts.Timeout = time.Duration(t * 1e9)
	if t > 0 && opts.Timeout == 0 {
		opts.Timeout = 1
	}
	opts.ChunkBytes = int64(o.chunk_bytes)
	opts.StagingBytes = int64(o.staging_bytes)
	opts.CoalesceBytes = int64(o.coalesce_bytes)
	opts.Domains = hier.DomainSizes{Src: int(o.src_domain_size), Dst: int(o.dst_domain_size)}
	opts.Verify = o.verify != 0
	opts.Atomic = o.atomic != 0
	opts.Stripe = o.stripe != 0
	opts.EmulateNetBW = float64(o.emulate_net_bw)
	return opts, nil
}

//export m2n_session_join
func m2n_session_join(comm C.int32_t, o *C.m2n_options, out *C.m2n_session) (rc C.int) {
	defer recovered(&rc)
	if out == nil {
		return result(invalidf("m2n_session_join: out is NULL"))
	}
	*out = 0
	if !mpi.Initialized() || mpi.Finalized() {
		return result(invalidf("m2n_session_join: MPI is not initialised (or already finalised): initialise it first, with MPI_THREAD_MULTIPLE " +
			"(from Python: from mpi4py import MPI); m2n never initialises MPI itself"))
	}
	lvl, err := mpi.QueryThread()
	if err != nil {
		return result(err)
	}
	c, err := mpi.FromFortran(int(comm))
	if err != nil {
		return result(invalidf("m2n_session_join: communicator %d: %v", comm, err))
	}
	if lvl < mpi.ThreadMultiple {
		return result(invalidf("m2n_session_join: rank %d: MPI was initialised with %v; m2n needs MPI_THREAD_MULTIPLE "+
			"(mpi4py asks for it unless mpi4py.rc.thread_level says otherwise)", c.Rank(), lvl))
	}
	opts, err := optionsOf(o)
	if err != nil {
		// fail every rank at once, not this one alone.
		return result(session.Refuse(c, session.Options{}, fmt.Errorf("rank %d: %w", c.Rank(), err)))
	}
	s, err := session.Join(c, opts)
	if err != nil {
		return result(err)
	}
	*out = C.m2n_session(register(&sessionEntry{s: s, calls: map[uint64]*callEntry{}, models: map[uint64]*modelEntry{}}))
	return C.M2N_OK
}

//export m2n_session_rank
func m2n_session_rank(h C.m2n_session, rank *C.int32_t) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	if rank == nil {
		return result(invalidf("m2n_session_rank: rank is NULL"))
	}
	*rank = C.int32_t(se.s.Rank())
	return C.M2N_OK
}

//export m2n_session_size
func m2n_session_size(h C.m2n_session, size *C.int32_t) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	if size == nil {
		return result(invalidf("m2n_session_size: size is NULL"))
	}
	*size = C.int32_t(se.s.Size())
	return C.M2N_OK
}

//export m2n_session_aborted
func m2n_session_aborted(h C.m2n_session, aborted *C.int32_t) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	if aborted == nil {
		return result(invalidf("m2n_session_aborted: aborted is NULL"))
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	a, _ := se.s.Aborted()
	*aborted = 0
	if a {
		*aborted = 1
	}
	return C.M2N_OK
}

//export m2n_session_close
func m2n_session_close(h C.m2n_session) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	forget(uint64(h))
	se.mu.Lock()
	defer se.mu.Unlock()
	var errs []error
	for mh, me := range se.models {
		forget(mh)
		errs = append(errs, me.m.Close())
	}
	for ch, ce := range se.calls {
		forget(ch)
		ce.c.Close()
	}
	aborted, _ := se.s.Aborted()
	if err := se.s.Close(); !aborted {
		errs = append(errs, err)
	} // after an abort Close returns it again: it was reported already.
	return result(errors.Join(errs...))
}

//export m2n_job_failed
func m2n_job_failed() (failed C.int32_t) {
	defer func() {
		if recover() != nil {
			failed = 1
		}
	}()
	if mpi.Failed() != nil {
		return 1
	}
	return 0
}

//export m2n_abort_job
func m2n_abort_job(code C.int32_t) {
	defer os.Exit(int(code)) // only if MPI_Abort panicked or returned
	defer func() { _ = recover() }()
	time.Sleep(mpi.FailGrace)
	mpi.Abort(nil, int(code))
}

// cInts reads n C int32s; NULL with n 0 reads as none.
func cInts(p *C.int32_t, n int) []int {
	if n <= 0 || p == nil {
		return nil
	}
	src := unsafe.Slice(p, n)
	out := make([]int, n)
	for i, v := range src {
		out[i] = int(v)
	}
	return out
}

// cInt64s reads n C int64s.
func cInt64s(p *C.int64_t, n int) []int64 {
	if n <= 0 || p == nil {
		return nil
	}
	src := unsafe.Slice(p, n)
	out := make([]int64, n)
	for i, v := range src {
		out[i] = int64(v)
	}
	return out
}
