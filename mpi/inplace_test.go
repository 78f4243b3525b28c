package mpi_test

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/m2n-dev/m2n/internal/mpitest"
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

// TestInPlaceAllreduceUnderGC is the crash as reported: two ranks run
// in-place AllreduceInt64 in a loop while another goroutine allocates and
// calls runtime.GC. Every other call runs from a deep stack, so that the
// collector finds stacks to shrink: with MPI_IN_PLACE in an unsafe.Pointer
// this died within the first few thousand iterations.
func TestInPlaceAllreduceUnderGC(t *testing.T) {
	iters := 100000
	if testing.Short() {
		iters = 10000
	}
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		defer gcPressure()()
		for i := range iters {
			buf := make([]int64, 4)
			for j := range buf {
				buf[j] = int64(c.Rank() + i + j)
			}
			var err error
			deep(i%2*(64+i%64), func() { err = c.AllreduceInt64(buf, buf, mpi.Sum) })
			if err != nil {
				t.Fatalf("iteration %d: %v", i, err)
			}
			for j, v := range buf {
				if want := int64(2*(i+j) + 1); v != want {
					t.Fatalf("iteration %d: element %d = %d, want %d", i, j, v, want)
				}
			}
		}
	})
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
	// bytes splits the reductions (56 bytes) into 2-element pieces and
	// keeps the gathers (14 and 11 bytes) in one in-place MPI call each; 8
	// bytes splits the reductions into single elements and sends both
	// gathers down their broadcast paths.
	chunks := []int{0, 16, 8}
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		defer gcPressure()()
		size, rank := c.Size(), c.Rank()
		const n = 7 // elements per rank
		counts := make([]int64, size)
		displs := make([]int64, size)
		var total int64
		for r := range size {
			counts[r] = int64(r*5 + 3) // uneven: 3, 8
			displs[r] = total
			total += counts[r]
		}
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
					ints := make([]int64, n)
					for j := range ints {
						ints[j] = int64(rank*1000 + i + j)
					}
					err := c.AllreduceInt64(ints, ints, mpi.Sum)
					check("AllreduceInt64", i, chunk, err, wantInts(ints, size, i))

					floats := make([]float64, n)
					for j := range floats {
						floats[j] = 0.5*float64(rank) + float64(i+j)
					}
					err = c.AllreduceFloat64(floats, floats, mpi.Max)
					check("AllreduceFloat64", i, chunk, err, wantFloats(floats, size, i))

					recv := make([]byte, size*n)
					copy(recv[rank*n:], pattern(rank+i, n))
					err = c.Allgather(recv[rank*n:(rank+1)*n], recv)
					check("Allgather", i, chunk, err, wantBlocks(recv, size, n, i))

					recvv := make([]byte, total)
					blk := recvv[displs[rank] : displs[rank]+counts[rank]]
					copy(blk, pattern(rank+i, int(counts[rank])))
					err = c.Allgatherv(blk, recvv, counts, displs)
					check("Allgatherv", i, chunk, err, wantBlocksv(recvv, counts, displs, i))
				})
				restore()
				calls += 4
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

// wantInts checks the in-place Sum of rank*1000 + i + j over size ranks.
func wantInts(got []int64, size, i int) string {
	for j, v := range got {
		want := int64(1000*size*(size-1)/2 + size*(i+j))
		if v != want {
			return fmt.Sprintf("element %d = %d, want %d", j, v, want)
		}
	}
	return ""
}

// wantFloats checks the in-place Max of 0.5*rank + i + j over size ranks.
func wantFloats(got []float64, size, i int) string {
	for j, v := range got {
		want := 0.5*float64(size-1) + float64(i+j)
		if math.Abs(v-want) > 1e-9 {
			return fmt.Sprintf("element %d = %v, want %v", j, v, want)
		}
	}
	return ""
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

// wantBlocksv checks that rank r's block of got is pattern(r+i, counts[r]).
func wantBlocksv(got []byte, counts, displs []int64, i int) string {
	for r := range counts {
		if d := diff(got[displs[r]:displs[r]+counts[r]], pattern(r+i, int(counts[r]))); d != "" {
			return fmt.Sprintf("rank %d's block: %s", r, d)
		}
	}
	return ""
}
