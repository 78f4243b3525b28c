// Package nccltest gives a test the one GPU with NCCL on it, or skips the
// test with the reason where CUDA or NCCL is missing.
package nccltest

import (
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/nccl"
)

// Setup returns a retained primary context of device 0 and a stream of
// it, both released when the test ends; it skips t where CUDA or NCCL is
// not available.
func Setup(t testing.TB) (*cuda.Context, *cuda.Stream) {
	t.Helper()
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nccl.Load(), nccl.ErrNotAvailable)
	return ctx, gputest.Stream(t, ctx)
}

// OneRank returns a communicator of one rank on ctx, destroyed when the
// test ends.
func OneRank(t testing.TB, ctx *cuda.Context) *nccl.Comm {
	t.Helper()
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comm, err := nccl.InitRank(1, id, 0, &nccl.Config{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = comm.Destroy() })
	return comm
}
