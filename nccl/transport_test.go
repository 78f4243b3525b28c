package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/internal/testutil/nccltest"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestGPUTransportExchange runs the transport-contract suite over the NCCL
// transport: with one GPU, a one-rank communicator sending to itself, on
// both of the transport's communicators (network and local class).
func TestGPUTransportExchange(t *testing.T) {
	ctx, _ := setup(t)
	comm := nccltest.OneRank(t, ctx)
	mem, err := cudamem.NewMemory(ctx)
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
