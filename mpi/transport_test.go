package mpi_test

import (
	"context"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestTransportExchange runs the transport-contract suite over the MPI
// transport with 4 real processes, with and without a deadline (Waitall
// versus polling Testall).
func TestTransportExchange(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		env := transporttest.Env{T: mpi.NewTransport(c, true), Mem: transport.HostMemory{}, IO: transport.HostMemory{}}
		if err := transporttest.Exchange(context.Background(), env, 5); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := transporttest.Exchange(ctx, env, 5); err != nil {
			t.Fatal(err)
		}
	})
}
