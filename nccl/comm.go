package nccl

// #include <stdlib.h>
// #include <string.h>
// #include "shim.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda"
)

// UniqueID identifies a communicator being created: one rank makes it with
// GetUniqueID and every rank passes the same bytes to InitRank.
type UniqueID [C.M2N_NCCL_UNIQUE_ID_BYTES]byte

// GetUniqueID returns a new id (ncclGetUniqueId). It opens a bootstrap
// listener on this host that the other ranks connect to.
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := Load(); err != nil {
		return id, err
	}
	var cid C.ncclUniqueId
	if err := call("ncclGetUniqueId", nil, func() C.ncclResult_t { return C.m2n_ncclGetUniqueId(&cid) }); err != nil {
		return id, err
	}
	copy(id[:], C.GoBytes(unsafe.Pointer(&cid), C.M2N_NCCL_UNIQUE_ID_BYTES))
	return id, nil
}

// Config is the communicator configuration (ncclConfig_t). The zero value
// (and a nil *Config) means NCCL's defaults: a blocking communicator.
type Config struct {
	// NonBlocking makes InitRank, Split and group calls return while NCCL
	// still works (ncclInProgress, see ErrInProgress); WaitReady polls.
	// NCCL_COMM_BLOCKING in the environment overrides it.
	NonBlocking bool
	// Context is the device context NCCL calls run under: it is made
	// current on the calling (locked) thread for each call. Nil uses
	// whatever is current on that thread, which for InitRank picks the
	// device: leave it nil only with the goroutine locked and a context
	// made current (cuda.Context.Bind).
	Context *cuda.Context
	// CommName names the communicator in NCCL's logs and profilers.
	CommName string
	// NetName picks a network plugin or transport (NCCL_NET).
	NetName string
	// SplitShare lets communicators split from this one share its
	// resources.
	SplitShare bool
	// CGAClusterSize, MinCTAs, MaxCTAs: 0 keeps NCCL's default.
	CGAClusterSize, MinCTAs, MaxCTAs int
	// InitTimeout bounds Bootstrap's wait for a non-blocking
	// communicator; 0 waits without limit.
	InitTimeout time.Duration
}

// cConfig is a C ncclConfig_t shared by the communicators that use it: NCCL
// keeps pointers into it (the name), and Split without a config copies them
// to the child, so it is freed with the last of them.
type cConfig struct {
	p    *C.m2n_nccl_config
	refs atomic.Int32
}

func (c *cConfig) ref() *cConfig {
	c.refs.Add(1)
	return c
}

func (c *cConfig) unref() {
	if c != nil && c.refs.Add(-1) == 0 {
		C.m2n_nccl_config_free(c.p)
	}
}

func (cfg *Config) c() *cConfig {
	if cfg == nil {
		cfg = &Config{}
	}
	blocking := C.int(1)
	if cfg.NonBlocking {
		blocking = 0
	}
	share := C.int(0)
	if cfg.SplitShare {
		share = 1
	}
	net, name := C.CString(cfg.NetName), C.CString(cfg.CommName)
	defer C.free(unsafe.Pointer(net))
	defer C.free(unsafe.Pointer(name))
	c := C.m2n_nccl_config_new(blocking, C.int(cfg.CGAClusterSize), C.int(cfg.MinCTAs), C.int(cfg.MaxCTAs), net, share, name)
	if c == nil {
		panic("nccl: out of memory")
	}
	return (&cConfig{p: c}).ref()
}

// Comm is an NCCL communicator. Like NCCL's, it is not safe for concurrent
// use: calls on one Comm must not overlap.
type Comm struct {
	h           C.ncclComm_t
	ctx         *cuda.Context
	nonBlocking bool
	cfg         *cConfig
	// A communicator from a non-blocking Split has no handle until NCCL
	// writes it into slot, when the split completes on parent.
	slot   *C.ncclComm_t
	parent *Comm
	// slots of NoColor splits that NCCL may still write to; freed with c.
	orphans []*C.ncclComm_t
}

// handle returns the NCCL handle: errClosed after Destroy or Abort, and an
// error matching ErrInProgress while a non-blocking Split is unfinished.
func (c *Comm) handle() (C.ncclComm_t, error) {
	if c.h != nil {
		return c.h, nil
	}
	if c.slot == nil {
		return nil, errClosed
	}
	if h := C.m2n_nccl_slot_load(c.slot); h != nil {
		c.h, c.parent = h, nil
		return h, nil
	}
	return nil, &Error{Op: "ncclCommSplit", Code: C.M2N_NCCL_IN_PROGRESS, Msg: "split still in progress on the parent communicator"}
}

// InitRank creates this rank's member of a communicator of nranks ranks
// (ncclCommInitRankConfig). Every rank calls it with the same id, its own
// rank, and its own device (cfg.Context). A blocking call returns once the
// communicator is ready; with cfg.NonBlocking it may return a Comm still
// being set up, with nil error: call WaitReady before using it.
func InitRank(nranks int, id UniqueID, rank int, cfg *Config) (*Comm, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: ncclCommInitRankConfig: rank %d of %d", rank, nranks)
	}
	c := &Comm{cfg: cfg.c()}
	if cfg != nil {
		c.ctx, c.nonBlocking = cfg.Context, cfg.NonBlocking
	}
	var cid C.ncclUniqueId
	C.memcpy(unsafe.Pointer(&cid), unsafe.Pointer(&id[0]), C.M2N_NCCL_UNIQUE_ID_BYTES)
	err := call("ncclCommInitRankConfig", c.ctx, func() C.ncclResult_t {
		return C.m2n_ncclCommInitRankConfig(&c.h, C.int(nranks), &cid, C.int(rank), c.cfg.p)
	})
	return c.started(err)
}

// started finishes InitRank: a non-blocking start is fine, a blocking
// caller waits, a failure frees what was made.
func (c *Comm) started(err error) (*Comm, error) {
	if errors.Is(err, ErrInProgress) {
		if c.nonBlocking {
			return c, nil
		}
		// Blocking asked for, but NCCL_COMM_BLOCKING=0 said otherwise.
		err = c.WaitReady(context.Background())
	}
	if err != nil {
		if c.h != nil {
			C.m2n_ncclCommAbort(c.h)
			c.h = nil
		}
		c.cfg.unref()
		c.cfg = nil
		return nil, err
	}
	return c, nil
}

var errClosed = errors.New("nccl: communicator destroyed or aborted")

// AsyncError returns the communicator's asynchronous state
// (ncclCommGetAsyncError): nil when ready and healthy, an error matching
// ErrInProgress while a non-blocking operation is under way, or the error
// that broke it (a network failure, say), after which only Abort helps.
//
// For a communicator from a non-blocking Split, it reports the split's
// progress on the parent until the split is done.
func (c *Comm) AsyncError() error {
	h, err := c.handle()
	if errors.Is(err, ErrInProgress) {
		if perr := c.parent.AsyncError(); perr != nil {
			return perr // still splitting, or the split failed
		}
		if h, err = c.handle(); err != nil {
			return errors.New("nccl: ncclCommSplit: finished without a communicator")
		}
	}
	if err != nil {
		return err
	}
	return call("ncclCommGetAsyncError", nil, func() C.ncclResult_t {
		var r C.ncclResult_t
		if r0 := C.m2n_ncclCommGetAsyncError(h, &r); r0 != C.M2N_NCCL_SUCCESS {
			return r0
		}
		return r
	})
}

// WaitReady polls AsyncError until the communicator is no longer in
// progress and returns its state. If ctx ends first the communicator is
// aborted (it cannot be used after) and the error wraps ctx.Err().
func (c *Comm) WaitReady(ctx context.Context) error {
	delay := 20 * time.Microsecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		err := c.AsyncError()
		if !errors.Is(err, ErrInProgress) {
			return err
		}
		select {
		case <-ctx.Done():
			aerr := c.Abort()
			return errors.Join(fmt.Errorf("nccl: WaitReady: communicator aborted: %w", ctx.Err()), aerr)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Millisecond)
		t.Reset(delay)
	}
}

// Count returns the number of ranks (ncclCommCount).
func (c *Comm) Count() (int, error) { return c.intQuery("ncclCommCount", 0) }

// UserRank returns this rank's rank (ncclCommUserRank).
func (c *Comm) UserRank() (int, error) { return c.intQuery("ncclCommUserRank", 1) }

func (c *Comm) intQuery(op string, which int) (int, error) {
	h, err := c.handle()
	if err != nil {
		return 0, err
	}
	var v C.int
	err = call(op, nil, func() C.ncclResult_t {
		if which == 0 {
			return C.m2n_ncclCommCount(h, &v)
		}
		return C.m2n_ncclCommUserRank(h, &v)
	})
	return int(v), err
}

// NoColor is the color with which a rank takes part in Split without joining
// any new communicator.
const NoColor = -1

// Split makes new communicators from this one (ncclCommSplit): every rank
// calls it; ranks with equal color form one, ordered by key then by their
// rank here. A rank passing NoColor gets a nil Comm and nil error. cfg nil
// inherits this communicator's configuration (and its Context).
//
// On a non-blocking communicator the split runs on in the background: c
// reports it (AsyncError, WaitReady) and must not be used until it is done,
// and the new Comm has no handle until then; its WaitReady waits for both.
func (c *Comm) Split(color, key int, cfg *Config) (*Comm, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if C.m2n_nccl_has(0) == 0 {
		return nil, errors.New("nccl: ncclCommSplit: this NCCL has no ncclCommSplit (needs 2.18)")
	}
	n := &Comm{ctx: c.ctx, nonBlocking: c.nonBlocking, parent: c}
	var ccfg *C.m2n_nccl_config
	if cfg != nil {
		n.cfg = cfg.c()
		ccfg = n.cfg.p
		n.nonBlocking = cfg.NonBlocking
		if cfg.Context != nil {
			n.ctx = cfg.Context
		}
	} else {
		n.cfg = c.cfg.ref() // NCCL copies the parent's config, pointers too
	}
	// NCCL stores the new handle from its own thread when the split is
	// done, so the slot must be C memory.
	n.slot = C.m2n_nccl_slot_new()
	if n.slot == nil {
		panic("nccl: out of memory")
	}
	err = call("ncclCommSplit", n.ctx, func() C.ncclResult_t {
		return C.m2n_ncclCommSplit(h, C.int(color), C.int(key), n.slot, ccfg)
	})
	if err != nil && !errors.Is(err, ErrInProgress) {
		n.free()
		return nil, err
	}
	if color == NoColor {
		// NCCL may still write NULL into the slot: keep it with c.
		c.orphans = append(c.orphans, n.slot)
		n.slot = nil
		n.free()
		return nil, nil
	}
	if _, herr := n.handle(); herr != nil && !c.nonBlocking {
		n.free()
		return nil, errors.New("nccl: ncclCommSplit: returned without a communicator")
	}
	return n, nil
}

// Destroy releases the communicator after its queued work completes:
// ncclCommFinalize, waiting out a non-blocking finalize, then
// ncclCommDestroy. A second call is a no-op.
func (c *Comm) Destroy() error {
	if c.h == nil && c.slot == nil {
		return nil
	}
	if _, err := c.handle(); err != nil {
		// An unfinished non-blocking Split: wait for it.
		if err := c.WaitReady(context.Background()); err != nil {
			return err
		}
	}
	var errs []error
	if C.m2n_nccl_has(1) != 0 {
		err := call("ncclCommFinalize", c.ctx, func() C.ncclResult_t { return C.m2n_ncclCommFinalize(c.h) })
		if errors.Is(err, ErrInProgress) {
			err = c.WaitReady(context.Background())
		}
		errs = append(errs, err)
	}
	errs = append(errs, call("ncclCommDestroy", c.ctx, func() C.ncclResult_t { return C.m2n_ncclCommDestroy(c.h) }))
	c.free()
	return errors.Join(errs...)
}

// Abort stops the communicator's work and frees it at once
// (ncclCommAbort), for errors and timeouts; the other ranks' calls fail or
// must be aborted too. A communicator whose non-blocking Split is
// unfinished is aborted through its parent, which is aborted too. A second
// call is a no-op.
func (c *Comm) Abort() error {
	h, err := c.handle()
	if errors.Is(err, ErrInProgress) {
		err = c.parent.Abort()
		c.free()
		return err
	}
	if err != nil {
		return nil // already destroyed or aborted
	}
	err = call("ncclCommAbort", c.ctx, func() C.ncclResult_t { return C.m2n_ncclCommAbort(h) })
	c.free()
	return err
}

func (c *Comm) free() {
	c.h = nil
	c.parent = nil
	if c.slot != nil {
		C.m2n_nccl_slot_free(c.slot)
		c.slot = nil
	}
	for _, s := range c.orphans {
		C.m2n_nccl_slot_free(s)
	}
	c.orphans = nil
	c.cfg.unref()
	c.cfg = nil
}
