package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/internal/testutil/nccltest"
	"github.com/m2n-dev/m2n/nccl"
)

// These tests need a GPU and NCCL; they skip, saying why, where either is
// missing. With one GPU every communicator has one rank.

// setup is nccltest.Setup.
var setup = nccltest.Setup

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func readBack(t *testing.T, ctx *cuda.Context, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := ctx.CopyDtoH(b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

// exercise runs a self send/recv on a one-rank communicator and checks
// the bytes. wait is called after the group (WaitReady for non-blocking
// communicators).
func exercise(t *testing.T, ctx *cuda.Context, s *cuda.Stream, c *nccl.Comm, wait func(error) error) {
	t.Helper()
	const n = 1<<20 + 3
	a := gputest.Alloc(t, ctx, n)
	b := gputest.Alloc(t, ctx, n)
	want := pattern(n, 0x5c)
	if err := ctx.CopyHtoD(a, want); err != nil {
		t.Fatal(err)
	}
	err := nccl.Group(func() error {
		if err := c.Send(a, n, 0, s); err != nil {
			return err
		}
		return c.Recv(b, n, 0, s)
	})
	if err := wait(err); err != nil {
		t.Fatalf("self send/recv: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readBack(t, ctx, b, n), want) {
		t.Fatal("self send/recv: bytes differ")
	}

}

func TestGPUOneRank(t *testing.T) {
	ctx, s := setup(t)
	v, err := nccl.Version()
	if err != nil {
		t.Fatal(err)
	}
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nccl.InitRank(1, id, 0, &nccl.Config{Context: ctx, CommName: "m2n-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	}()
	count, err1 := c.Count()
	rank, err2 := c.UserRank()
	if err := errors.Join(err1, err2); err != nil || count != 1 || rank != 0 {
		t.Fatalf("Count %d, UserRank %d: %v", count, rank, err)
	}
	if err := c.AsyncError(); err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %d: one-rank communicator on %v", v, ctx.Device())
	exercise(t, ctx, s, c, func(err error) error { return err })

	sub, err := c.Split(0, 0, nil)
	if err != nil || sub == nil {
		t.Fatalf("Split(0, 0) = %v, %v", sub, err)
	}
	if n, err := sub.Count(); err != nil || n != 1 {
		t.Fatalf("split Count = %d, %v", n, err)
	}
	exercise(t, ctx, s, sub, func(err error) error { return err })
	if err := sub.Destroy(); err != nil {
		t.Fatal(err)
	}
	none, err := c.Split(nccl.NoColor, 0, nil)
	if err != nil || none != nil {
		t.Fatalf("Split(NoColor) = %v, %v", none, err)
	}
}

func TestGPUNonBlocking(t *testing.T) {
	ctx, s := setup(t)
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nccl.InitRank(1, id, 0, &nccl.Config{Context: ctx, NonBlocking: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	}()
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("non-blocking init ready after %v", time.Since(start))
	wait := func(err error) error {
		if errors.Is(err, nccl.ErrInProgress) {
			return c.WaitReady(wctx)
		}
		return err
	}
	exercise(t, ctx, s, c, wait)

	// A non-blocking split finishes in the background; the child has no
	// handle until then.
	sub, err := c.Split(0, 0, nil)
	if err != nil || sub == nil {
		t.Fatalf("Split = %v, %v", sub, err)
	}
	if err := sub.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if n, err := sub.Count(); err != nil || n != 1 {
		t.Fatalf("split Count = %d, %v", n, err)
	}
	exercise(t, ctx, s, sub, func(err error) error {
		if errors.Is(err, nccl.ErrInProgress) {
			return sub.WaitReady(wctx)
		}
		return err
	})
	if err := sub.Destroy(); err != nil {
		t.Fatal(err)
	}
	none, err := c.Split(nccl.NoColor, 0, nil)
	if err != nil || none != nil {
		t.Fatalf("Split(NoColor) = %v, %v", none, err)
	}
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
}

func TestGPUAbort(t *testing.T) {
	ctx, s := setup(t)
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nccl.InitRank(1, id, 0, &nccl.Config{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(0, 1, 0, s); err == nil {
		t.Fatal("Send after Abort accepted")
	}
	if err := c.Abort(); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy after Abort: %v", err)
	}
}

type oneRank struct{}

func (oneRank) Rank() int                   { return 0 }
func (oneRank) Size() int                   { return 1 }
func (oneRank) Bcast(_ []byte, _ int) error { return nil }

func TestGPUBootstrap(t *testing.T) {
	ctx, s := setup(t)
	for _, nb := range []bool{false, true} {
		c, err := nccl.Bootstrap(oneRank{}, &nccl.Config{Context: ctx, NonBlocking: nb, InitTimeout: time.Minute})
		if err != nil {
			t.Fatalf("non-blocking %v: %v", nb, err)
		}
		wait := func(err error) error {
			if errors.Is(err, nccl.ErrInProgress) {
				return c.WaitReady(context.Background())
			}
			return err
		}
		exercise(t, ctx, s, c, wait)
		if err := c.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGPUWaitReadyTimeout starts a two-rank communicator whose second rank
// never comes: WaitReady must give up at its deadline and abort it.
func TestGPUWaitReadyTimeout(t *testing.T) {
	ctx, _ := setup(t)
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nccl.InitRank(2, id, 0, &nccl.Config{Context: ctx, NonBlocking: true})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err = c.WaitReady(wctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady = %v, want a deadline error", err)
	}
	t.Logf("gave up after %v: %v", time.Since(start), err)
	if err := c.AsyncError(); err == nil {
		t.Error("aborted communicator reports no error")
	}
}
