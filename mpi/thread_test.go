package mpi_test

import (
	"sync"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// TestConcurrentGoroutines checks the ThreadMultiple contract that the
// package documents: goroutines on every rank exchange messages with
// blocking and nonblocking calls at the same time.
func TestConcurrentGoroutines(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		level, err := mpi.QueryThread()
		if err != nil {
			t.Fatal(err)
		}
		if level != mpi.ThreadMultiple {
			t.Fatalf("QueryThread() = %v; mpitest asks for %v, which OpenMPI provides", level, mpi.ThreadMultiple)
		}
		const workers, rounds = 8, 50
		size, rank := c.Size(), c.Rank()
		right, left := (rank+1)%size, (rank+size-1)%size
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := range rounds {
					in := make([]byte, 64)
					r, err := c.Irecv(in, left, w)
					if err != nil {
						errs[w] = err
						return
					}
					if w%2 == 0 {
						err = c.Send(pattern(rank*100+i, 64), right, w)
					} else {
						var s *mpi.Request
						if s, err = c.Isend(pattern(rank*100+i, 64), right, w); err == nil {
							err = s.Wait()
						}
					}
					if err == nil {
						err = r.Wait()
					}
					if err != nil {
						errs[w] = err
						return
					}
					if d := diff(in, pattern(left*100+i, 64)); d != "" {
						t.Errorf("worker %d round %d: %s", w, i, d)
					}
				}
			})
		}
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
		}
	})
}
