package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// TestPrepareChecksMemory prepares calls of a 1 TiB tensor without
// allocating its buffers: on the flat route the plans, the schedule and
// the staging fit, so Prepare succeeds; on agbcast every source would hold
// the whole tensor in scratch, so Prepare fails on every rank with the
// same *session.MemoryError naming a source rank, the tensor and the
// numbers, before its first run allocates anything. CheckMemory of a
// footprint no host holds fails alike, and the session stays usable.
func TestPrepareChecksMemory(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 30 * time.Second})
		defer s.Close()
		specs := []refit.Spec{{Name: "huge", Src: layout(t, "65536x65536x64", dtype.F32, []int{2}, 0, "S0"),
			Dst: layout(t, "65536x65536x64", dtype.F32, []int{2}, 2, "S1")}}
		call, err := s.Prepare(context.Background(), specs, reshard.Flat)
		if err != nil {
			t.Fatalf("flat: %v", err)
		}
		call.Close()
		_, err = s.Prepare(context.Background(), specs, reshard.AllGatherBroadcast)
		var me *session.MemoryError
		if !errors.As(err, &me) || me.Tensor != "huge" || me.Rank != 0 || me.Need < 1<<40 || me.Have >= me.Need ||
			!strings.Contains(err.Error(), `rank 0, tensor "huge": needs `) || !strings.Contains(err.Error(), "staging and scratch 1.0 TiB") {
			t.Fatalf("agbcast: %v (%T), want a memory error naming rank 0 and tensor huge", err, err)
		}
		err = s.CheckMemory(context.Background(), session.Footprint{Tensor: "t", HostCopies: 1 << 62})
		if !errors.As(err, &me) || me.Memory != "host memory" || len(me.Ranks) != 4 {
			t.Fatalf("CheckMemory: %v", err)
		}
		if aborted, _ := s.Aborted(); aborted {
			t.Fatal("a memory error aborted the session")
		}
		if err := s.CheckMemory(context.Background(), session.Footprint{Tensor: "t", Buffers: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCheckMemoryGPU reads a GPU's free memory through the session's
// device (cuMemGetInfo): a footprint larger than any GPU fails with the
// numbers, naming GPU memory and where they were read, and one that fits
// passes. It skips where no CUDA driver loads.
func TestCheckMemoryGPU(t *testing.T) {
	if err := cuda.Load(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Device: session.GPU, Timeout: time.Minute})
		defer s.Close()
		err := s.CheckMemory(context.Background(), session.Footprint{Tensor: "t", Buffers: 1 << 44})
		var me *session.MemoryError
		if !errors.As(err, &me) || me.Memory != "GPU memory" || me.Have <= 0 || me.Have >= 1<<44 || !strings.Contains(me.From, "cuMemGetInfo") {
			t.Fatalf("a 16 TiB footprint on one GPU: %v", err)
		}
		fmt.Printf("RESULT %v\n", err)
		if err := s.CheckMemory(context.Background(), session.Footprint{Tensor: "t", Buffers: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	})
}
