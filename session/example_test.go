package session_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// A trainer of 4 ranks hands a column-parallel weight to a DP2 x TP2
// generator every step (run under mpirun -np 8). The call is prepared
// once; each step moves that step's bytes.
func Example() {
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		log.Fatal(err)
	}
	defer mpi.Finalize()
	s, err := session.Join(mpi.World(), session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	trainer, _ := mesh.Interval([]int{4}, 0)
	generator, _ := mesh.Interval([]int{2, 2}, 4)
	src, _ := placement.ParseLayout("4096x1024", dtype.BF16, trainer, "S0")
	dst, _ := placement.ParseLayout("4096x1024", dtype.BF16, generator, "R,S0")
	ctx := context.Background()
	call, err := s.Prepare(ctx, []refit.Spec{{Name: "q_proj.weight", Src: src, Dst: dst}}, hier.Hier{})
	if err != nil {
		log.Fatal(err)
	}
	var buf refit.TensorBuffers // this rank's shards, from its own memory
	if src.Mesh().Contains(s.Rank()) {
		buf.Src = transport.HostBuffer(make([]byte, src.LocalBytes(s.Rank())))
	}
	if dst.Mesh().Contains(s.Rank()) {
		buf.Dst = transport.HostBuffer(make([]byte, dst.LocalBytes(s.Rank())))
	}
	for step := 0; step < 100; step++ {
		if _, err := call.Run(ctx, []refit.TensorBuffers{buf}); err != nil {
			log.Fatal(err)
		}
	}
}

// Errors keep their types on every rank: a rank that never arrives is
// named by a *control.TimeoutError on every other rank; a bad buffer on any
// rank is a *refit.BufferError everywhere.
func ExampleSession_Prepare_errors() {
	var call *refit.Call // prepared as in the package example
	var bufs []refit.TensorBuffers
	_, err := call.Run(context.Background(), bufs)
	var te *control.TimeoutError
	var be *refit.BufferError
	switch {
	case errors.As(err, &te):
		fmt.Printf("gave up waiting for ranks %v\n", te.Peers) // the session has aborted
	case errors.As(err, &be):
		fmt.Printf("rank %d's %s buffer of %s: %s\n", be.Rank, be.Side, be.Tensor, be.Why) // the session stays usable
	}
}

// Pipeline stages (the paper's Example B): two stages of two trainer
// ranks and one generator rank, each stage on a communicator of its own,
// run concurrently every step.
func ExampleSession_Pipeline() {
	var s *session.Session // joined over 5 ranks
	st, err := s.Pipeline(pipeline.Contiguous(2, 2, 1))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	trainer, _ := mesh.Interval([]int{2}, 0) // local to each stage's communicator
	generator, _ := mesh.Interval([]int{1}, 2)
	specs := func(stage int) []refit.Spec {
		src, _ := placement.ParseLayout("8x6", dtype.F32, trainer, "S0")
		dst, _ := placement.ParseLayout("8x6", dtype.F32, generator, "R")
		return []refit.Spec{{Name: fmt.Sprintf("layers.%d.w", stage), Src: src, Dst: dst}}
	}
	call, err := st.Prepare(context.Background(), specs, hier.Hier{})
	if err != nil {
		log.Fatal(err)
	}
	var bufs [][]refit.TensorBuffers // per stage, this rank's buffers
	if _, err := call.Run(context.Background(), func(stage int) []refit.TensorBuffers { return bufs[stage] }); err != nil {
		log.Fatal(err)
	}
}

// A whole model every step: its layouts from model.New, one call per
// pipeline stage prepared at once, this rank's (fused) buffers allocated,
// filled and checked with package pattern. Errors return rather than exit,
// so that the deferred Close runs and the other ranks learn of a failure
// at their next collective (examples/model is this as a program).
func ExampleSession_PrepareModel() {
	var s *session.Session // joined over 8 ranks
	err := func() error {
		m, err := model.Load("deepseek-v3", model.LoadOptions{Scale: 32, Layers: 2})
		if err != nil {
			return err
		}
		layouts, err := model.New(m, model.Trainer{PP: 2, EP: 2, DP: 2}, model.Generator{TP: 2, DP: 2})
		if err != nil {
			return err
		}
		ctx := context.Background()
		sync, err := s.PrepareModel(ctx, layouts, hier.Hier{})
		if err != nil {
			return err
		}
		defer sync.Close()
		bufs, err := sync.Alloc()
		if err != nil {
			return err
		}
		defer sync.Free(bufs)
		if err := sync.FillParts(bufs, model.Src, pattern.Fill); err != nil {
			return err
		}
		if _, err := sync.Run(ctx, bufs); err != nil {
			return err
		}
		return sync.ReadParts(bufs, model.Dst, pattern.Check)
	}()
	if err != nil {
		fmt.Println(err)
	}
}
