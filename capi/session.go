package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
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
	closed map[uint64]bool // calls and models closed (closedMu)
}

func sessionOf(h C.m2n_session) (*sessionEntry, error) {
	return lookup[*sessionEntry](uint64(h), "session")
}

// optionsSize is the size of this library's m2n_options; optionsV2 that of
// ABI version 2's (and 1's), which ended at emulate_net_bw: a caller built
// against it passes that size, and reads as delta off.
const (
	optionsSize = C.sizeof_m2n_options
	optionsV2   = C.size_t(unsafe.Offsetof(C.m2n_options{}.delta))
)

//export m2n_options_init
func m2n_options_init(o *C.m2n_options) {
	defer func() { _ = recover() }()
	if o == nil {
		return
	}
	*o = C.m2n_options{}
	o.struct_size = C.uint32_t(optionsSize)
	o.device = C.M2N_DEVICE_CPU
	o.cuda_device = C.M2N_CUDA_DEVICE_LOCAL_RANK
}

// timeoutOf reads m2n_options.timeout_seconds: 0 is the default (300 s);
// NaN, infinities, negative values and values past a Go time.Duration
// (about 292 years) are refused, naming the field and the value.
func timeoutOf(t float64) (time.Duration, error) {
	why := ""
	switch {
	case math.IsNaN(t):
		why = "not a number"
	case t < 0:
		why = "negative"
	case t > 0 && t*1e9 < 1:
		why = "shorter than a nanosecond, the finest timeout there is"
	case math.IsInf(t, 1) || t*1e9 >= math.Exp2(63):
		why = "longer than m2n can wait (a Go time.Duration holds at most 9223372036 s, about 292 years)"
	}
	if why != "" {
		return 0, optionError(&reshard.FieldError{Field: "timeout_seconds", Got: strconv.FormatFloat(t, 'g', -1, 64), Why: why +
			"; want 0 (the default, 300 s) or a positive number of seconds up to 9223372036"})
	}
	return time.Duration(t * 1e9), nil
}

// finiteRate refuses a NaN, infinite or negative rate option.
func finiteRate(field string, v float64, want string) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return optionError(&reshard.FieldError{Field: field, Got: strconv.FormatFloat(v, 'g', -1, 64), Why: "want " + want})
	}
	return nil
}

// optionError is a bad m2n_options field: M2N_ERR_INVALID, wrapping the
// field's error (so the detail names the field and value).
func optionError(fe *reshard.FieldError) error {
	return &argError{msg: "options: " + fe.Error(), err: fe}
}

// optionsOf reads m2n_options (nil: the defaults) into session options.
func optionsOf(o *C.m2n_options) (session.Options, error) {
	var opts session.Options
	if o == nil {
		return opts, nil
	}
	if o.struct_size != C.uint32_t(optionsSize) && o.struct_size != C.uint32_t(optionsV2) {
		return opts, invalidf("options: struct_size %d, want %d (this library's m2n_options; call m2n_options_init) or %d (ABI version 2's)",
			o.struct_size, optionsSize, optionsV2)
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
	var err error
	if opts.Timeout, err = timeoutOf(float64(o.timeout_seconds)); err != nil {
		return opts, err
	}
	if err := finiteRate("emulate_net_bw", float64(o.emulate_net_bw), "bytes per second, 0 (off) or more"); err != nil {
		return opts, err
	}
	opts.ChunkBytes = int64(o.chunk_bytes)
	opts.StagingBytes = int64(o.staging_bytes)
	opts.CoalesceBytes = int64(o.coalesce_bytes)
	opts.Domains = hier.DomainSizes{Src: int(o.src_domain_size), Dst: int(o.dst_domain_size)}
	opts.Verify = o.verify != 0
	opts.Atomic = o.atomic != 0
	opts.Stripe = o.stripe != 0
	opts.EmulateNetBW = float64(o.emulate_net_bw)
	if o.struct_size == C.uint32_t(optionsSize) {
		opts.Delta = o.delta != 0 // a CUDA session refuses it at join (session.Options)
	}
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
	opts, optErr := optionsOf(o)
	if optErr != nil {
		optErr = fmt.Errorf("%s: %w", rankName(c), optErr)
	}
	// fail every rank at once on this rank's bad options, not this one alone.
	if err := agreeToJoin(c, opts.Timeout, optErr); err != nil {
		return result(err)
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
	return result(se.leave(uint64(h), nil))
}

// leave closes a session entry, its calls and models, and leaves the
// session with cause (nil: a plain close): see session.Session.Leave.
func (se *sessionEntry) leave(h uint64, cause error) error {
	forget(h)
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
	se.calls, se.models = map[uint64]*callEntry{}, map[uint64]*modelEntry{}
	aborted, _ := se.s.Aborted()
	if err := se.s.Leave(cause); !aborted {
		errs = append(errs, err)
	} // after an abort Leave returns it again: it was reported already.
	return errors.Join(errs...)
}

//export m2n_session_leave
func m2n_session_leave(h C.m2n_session, why *C.char) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	reason := goString(why)
	if reason == "" {
		reason = "its program failed"
	}
	return result(se.leave(uint64(h), errors.New(worldRankNote(se.s.Rank())+reason)))
}

//export m2n_session_refuse
func m2n_session_refuse(comm C.int32_t, why *C.char) (rc C.int) {
	defer recovered(&rc)
	if !mpi.Initialized() || mpi.Finalized() {
		return result(invalidf("m2n_session_refuse: MPI is not initialised (or already finalised)"))
	}
	c, err := mpi.FromFortran(int(comm))
	if err != nil {
		return result(invalidf("m2n_session_refuse: communicator %d: %v", comm, err))
	}
	reason := goString(why)
	if reason == "" {
		reason = "refused to join"
	}
	return result(agreeToJoin(c, session.DefaultTimeout, fmt.Errorf("%s: %s", rankName(c), reason)))
}

// rankName names this rank of c as the messages do: "rank 3", with its
// rank in MPI_COMM_WORLD where that differs ("rank 3 (world rank 7)").
func rankName(c *mpi.Comm) string {
	return fmt.Sprintf("rank %d", c.Rank()) + worldRankSuffix(c.Rank())
}

// worldRankSuffix is " (world rank N)" when this process's rank in
// MPI_COMM_WORLD differs from rank (its rank in a session), else "".
func worldRankSuffix(rank int) string {
	w := mpi.World()
	if w == nil {
		return ""
	}
	if wr := w.Rank(); wr != rank {
		return fmt.Sprintf(" (world rank %d)", wr)
	}
	return ""
}

// worldRankNote is "world rank N: " when this process's world rank differs
// from its session rank, else "" (a LeftError names the session rank).
func worldRankNote(rank int) string {
	if s := worldRankSuffix(rank); s != "" {
		return s[2:len(s)-1] + ": "
	}
	return ""
}

// closedMu guards every sessionEntry's closed set: the handles of the
// calls and models closed while the session stays open, so that a rank
// using one after closing it (while its peers run that call's step)
// leaves the session, naming the cause to them, rather than failing alone
// and leaving them to wait out the timeout. An entry costs a few bytes;
// they go with the session.
var closedMu sync.Mutex

// closedHandle records that call or model handle h of se was closed.
func (se *sessionEntry) closedHandle(h uint64) {
	closedMu.Lock()
	defer closedMu.Unlock()
	if se.closed == nil {
		se.closed = map[uint64]bool{}
	}
	se.closed[h] = true
}

// closedIn returns the handle and entry of the open session whose call or
// model handle h was closed.
func closedIn(h uint64) (uint64, *sessionEntry) {
	handles.Lock()
	defer handles.Unlock()
	closedMu.Lock()
	defer closedMu.Unlock()
	for sh, v := range handles.m {
		if se, ok := v.(*sessionEntry); ok && se.closed[h] {
			return sh, se
		}
	}
	return 0, nil
}

// usedAfterClose is the error for handle h of kind ("call", "model") that
// lookup could not find: when h is a closed one of a session still open,
// this rank leaves that session (its peers, waiting in the step this rank
// cannot take part in, fail at once with M2N_ERR_LEFT naming it and why)
// and the error says so; otherwise it is lookupErr.
func usedAfterClose(h uint64, kind, fn string, lookupErr error) error {
	sh, se := closedIn(h)
	if se == nil {
		return lookupErr // never made, or its session is closed too: nobody waits for this rank
	}
	rank := se.s.Rank()
	why := fmt.Sprintf("%s on %s handle %d after closing it (m2n_%s_close), so it cannot take part in the step its peers run",
		fn, kind, h, kind)
	lerr := se.leave(sh, errors.New(worldRankNote(rank)+why))
	msg := fmt.Sprintf("rank %d%s: %s: this rank left the session, so that its peers fail at once naming it", rank, worldRankSuffix(rank), why)
	if lerr != nil {
		msg += fmt.Sprintf(" (leaving: %v)", lerr)
	}
	return &argError{msg: msg}
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
