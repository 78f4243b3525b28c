package mpi_test

import (
	"context"
	"errors"
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

// TestTransportPollsInline checks that a round's Wait calls its context's
// poll while it waits (first with since 0), and that the poll's error ends
// the wait, leaving the round to a later Wait.
func TestTransportPollsInline(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		tr := mpi.NewTransport(c, true)
		if !transport.PollsInline(tr) {
			t.Fatal("the MPI transport does not poll inline")
		}
		buf := transport.HostBuffer(make([]byte, 64))
		if c.Rank() == 0 {
			if err := c.Barrier(); err != nil { // rank 1's first wait gave up
				t.Fatal(err)
			}
			p, err := tr.Start([]transport.Op{{Peer: 1, Send: true, Tag: 3, Buf: buf, Len: 64}})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			return
		}
		p, err := tr.Start([]transport.Op{{Peer: 0, Tag: 3, Buf: buf, Len: 64}})
		if err != nil {
			t.Fatal(err)
		}
		var calls []time.Duration
		stop := errors.New("stop")
		// bounded: a Wait that never polls ends at the deadline instead
		bounded, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx := transport.WithPoll(bounded, func(since time.Duration) error {
			if calls = append(calls, since); len(calls) == 3 {
				return stop
			}
			return nil
		})
		if err := p.Wait(ctx); err != stop {
			t.Errorf("Wait with a failing poll = %v, want its error", err)
		}
		if len(calls) != 3 || calls[0] != 0 || calls[1] <= 0 {
			t.Errorf("poll calls (since) = %v, want 3, the first 0", calls)
		}
		if err := c.Barrier(); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
