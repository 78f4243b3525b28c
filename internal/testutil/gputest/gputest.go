// Package gputest has the helpers that let GPU tests skip, with the reason,
// where there is no GPU, and run for real where there is one.
package gputest

import (
	"errors"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
)

// SkipIfNotAvailable skips t when err wraps sentinel (a package's
// ErrNotAvailable), with err as the reason ("cuda: not available:
// libcuda.so.1 not found: ..."); any other non-nil err fails t.
func SkipIfNotAvailable(t testing.TB, err error, sentinel error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, sentinel) {
		t.Skip(err)
	}
	t.Fatal(err)
}

// Context loads CUDA and returns a retained primary context of device 0,
// released when the test ends. It skips t where CUDA is not available.
func Context(t testing.TB) *cuda.Context {
	t.Helper()
	SkipIfNotAvailable(t, cuda.Load(), cuda.ErrNotAvailable)
	dev, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Release(); err != nil {
			t.Error(err)
		}
	})
	return ctx
}

// Stream returns a new stream of ctx, destroyed when the test ends.
func Stream(t testing.TB, ctx *cuda.Context) *cuda.Stream {
	t.Helper()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Alloc returns n bytes of device memory, freed when the test ends.
func Alloc(t testing.TB, ctx *cuda.Context, n int) cuda.DevicePtr {
	t.Helper()
	p, err := ctx.Alloc(max(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Free(p); err != nil {
			t.Error(err)
		}
	})
	return p
}
