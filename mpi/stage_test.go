package mpi_test

import (
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pipeline"
)

// TestSplitStages builds the paper's Example B on 5 real processes: stage
// communicator 0 is world {0,1,4}, 1 is {2,3,4}, and rank 4 is local rank 2
// in both.
func TestSplitStages(t *testing.T) {
	mpitest.Run(t, 5, func(t mpitest.T, c *mpi.Comm) {
		l := pipeline.Contiguous(2, 2, 1)
		comms, err := c.SplitStages(l)
		if err != nil {
			t.Fatal(err)
		}
		for s, sc := range comms {
			want := l.LocalRank(s, c.Rank())
			if (sc == nil) != (want < 0) {
				t.Fatalf("stage %d: communicator %v, local rank %d", s, sc, want)
			}
			if sc == nil {
				continue
			}
			if sc.Rank() != want || sc.Size() != 3 {
				t.Errorf("stage %d: rank %d of %d, want %d of 3", s, sc.Rank(), sc.Size(), want)
			}
			// every member learns the world ranks of its stage.
			mine := []byte{byte(c.Rank())}
			all := make([]byte, sc.Size())
			if err := sc.Allgather(mine, all); err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, b := range all {
				got = append(got, int(b))
			}
			if !slices.Equal(got, l.Members(s)) {
				t.Errorf("stage %d members %v, want %v", s, got, l.Members(s))
			}
			if err := sc.Free(); err != nil {
				t.Error(err)
			}
		}
	})
}
