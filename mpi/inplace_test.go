package mpi_test

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// The in-place collectives once kept MPI_IN_PLACE ((void*)1) in an
// unsafe.Pointer on the Go stack; when the garbage collector shrank or
// grew that stack the runtime threw "invalid pointer found on stack". The
// tests below keep the collector busy while ranks run in-place collectives,
// so that any such value on a Go stack kills the job.

// gcPressure allocates, drops and collects garbage on its own goroutine
// until the returned stop function is called, with the collector running as
// often as it can (GOGC=1), so that stacks are scanned, shrunk and moved
// while the caller works.
func gcPressure() (stop func()) {
	old := debug.SetGCPercent(1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var keep [64][]byte
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			keep[i%len(keep)] = make([]byte, 1+(i*7919)%(64<<10))
			if i%64 == 0 {
				runtime.GC()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		debug.SetGCPercent(old)
	}
}

// deep calls f from depth frames down, each holding a pointer-free pad, so
// that the stack first grows and, once deep returns, is left mostly unused
// for the collector to shrink. The pads keep the compiler from turning the
// recursion into a loop.
func deep(depth int, f func()) byte {
	var pad [512]byte
	pad[depth%len(pad)] = byte(depth)
	if depth <= 0 {
		f()
		return pad[0]
	}
	return deep(depth-1, f) + pad[(depth*31)%len(pad)]
}

// TestInPlaceCollectivesUnderGC runs every in-place collective thousands of
// times, in one MPI call and chunked, from shallow and deep stacks, under
// garbage-collector pressure, and checks every result.
func TestInPlaceCollectivesUnderGC(t *testing.T) {
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	// Chunk 0 keeps the default limit: one MPI call per collective. 16
	// bytes keeps the gather (14 bytes) in one in-place MPI call; 8 bytes
	// sends it down its broadcast path.
	chunks := []int{0, 16, 8}
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		defer gcPressure()()
		size, rank := c.Size(), c.Rank()
		const n = 7 // elements per rank
		check := func(what string, i, chunk int, err error, bad string) {
			if err != nil {
				t.Fatalf("%s, iteration %d, chunk %d: %v", what, i, chunk, err)
			}
			if bad != "" {
				t.Fatalf("%s, iteration %d, chunk %d: %s", what, i, chunk, bad)
			}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		calls := 0
		for i := range iters {
			for _, chunk := range chunks {
				// Alternate shallow and deep stacks, so that the stack
				// grows, then shrinks at the next collection.
				depth := 0
				if i%2 == 1 {
					depth = 64 + i%64
				}
				restore := func() {}
				if chunk > 0 {
					restore = mpi.SetChunkBytes(chunk)
				}
				deep(depth, func() {
					recv := make([]byte, size*n)
					copy(recv[rank*n:], pattern(rank+i, n))
					err := c.Allgather(recv[rank*n:(rank+1)*n], recv)
					check("Allgather", i, chunk, err, wantBlocks(recv, size, n, i))
				})
				restore()
				calls++
			}
		}
		runtime.ReadMemStats(&after)
		gcs := after.NumGC - before.NumGC
		if gcs == 0 {
			t.Errorf("no garbage collection ran during %d collectives: the test proves nothing", calls)
		}
		if rank == 0 {
			t.Logf("%d in-place collectives per rank during %d garbage collections", calls, gcs)
		}
	})
}

// wantBlocks checks that block r of got is pattern(r+i, n).
func wantBlocks(got []byte, size, n, i int) string {
	for r := range size {
		if d := diff(got[r*n:(r+1)*n], pattern(r+i, n)); d != "" {
			return fmt.Sprintf("rank %d's block: %s", r, d)
		}
	}
	return ""
}
