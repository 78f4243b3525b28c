package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestGPUTransportExchange runs the transport-contract suite over the NCCL
// transport: with one GPU, a one-rank communicator sending to itself, on
// both of the transport's communicators (network and local class).
func TestGPUTransportExchange(t *testing.T) {
	ctx, _ := setup(t)
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comm, err := nccl.InitRank(1, id, 0, &nccl.Config{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for _, topo := range []reshard.Topology{{}, {Domain: []int{0}}} {
		tr, err := nccl.NewTransport(comm, ctx, topo)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		env := transporttest.Env{T: tr, Mem: mem, IO: mem}
		if err := transporttest.Exchange(cctx, env, 6); err != nil {
			t.Errorf("topology %+v: %v", topo, err)
		}
		cancel()
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	}
}

// single is the launcher communicator of a one-rank job.
type single struct{}

func (single) Rank() int                        { return 0 }
func (single) Size() int                        { return 1 }
func (single) Bcast(buf []byte, root int) error { return nil }

// TestGPUBootstrapStages builds per-stage NCCL communicators from stage
// communicators (one GPU: one stage of one colocated rank, and a stage this
// rank is not in) and moves bytes on the one it made.
func TestGPUBootstrapStages(t *testing.T) {
	ctx, s := setup(t)
	comms, err := nccl.BootstrapStages([]nccl.Broadcaster{single{}, nil}, &nccl.Config{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if comms[0] == nil || comms[1] != nil {
		t.Fatalf("communicators %v, want one for stage 0 only", comms)
	}
	defer comms[0].Destroy()
	if n, err := comms[0].Count(); err != nil || n != 1 {
		t.Fatalf("stage 0 has %d ranks, %v", n, err)
	}
	exercise(t, ctx, s, comms[0], func(err error) error { return err })
}
