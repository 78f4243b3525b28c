package mpi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/strided"
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

// TestTransportCachesDatatypes: every rank sends a strided region of its
// buffer in place to the next rank and receives one into a region of
// another shape, five steps with the same shapes: the transport builds the
// two datatypes once (none more after the first step), every byte lands
// where the region says, and Close frees them; a step after Close builds
// them again.
func TestTransportCachesDatatypes(t *testing.T) {
	mpitest.Run(t, 3, func(t mpitest.T, c *mpi.Comm) {
		tr := mpi.NewTransport(c, true)
		rank, world := c.Rank(), c.Size()
		send := strided.Desc{Offset: 3, Run: 5, Count: []int64{4}, Stride: []int64{16}}       // 20 bytes
		recv := strided.Desc{Offset: 1, Run: 2, Count: []int64{2, 5}, Stride: []int64{40, 8}} // 20 bytes
		step := func(n int) {
			src := make([]byte, 80)
			for i := range src {
				src[i] = byte(31*rank + 7*n + i)
			}
			dst := make([]byte, 100)
			ops := []transport.Op{
				{Peer: (rank + world - 1) % world, Tag: int32(n), Buf: transport.HostBuffer(dst), Len: recv.Bytes(), InPlace: true, At: recv},
				{Peer: (rank + 1) % world, Send: true, Tag: int32(n), Buf: transport.HostBuffer(src), Len: send.Bytes(), InPlace: true, At: send},
			}
			p, err := tr.Start(ops)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			from := (rank + world - 1) % world
			var want []byte // the sender's region, in order
			for k := range send.Count[0] {
				for j := range send.Run {
					want = append(want, byte(31*from+7*n+int(send.Offset+k*send.Stride[0]+j)))
				}
			}
			i := 0
			for a := range recv.Count[0] {
				for b := range recv.Count[1] {
					for j := range recv.Run {
						at := recv.Offset + a*recv.Stride[0] + b*recv.Stride[1] + j
						if dst[at] != want[i] {
							t.Fatalf("step %d: byte %d of the region (at %d) is %d, want %d", n, i, at, dst[at], want[i])
						}
						i++
					}
				}
			}
		}
		for n := range 5 {
			step(n)
			if got := mpi.CachedTypes(tr); got != 2 {
				t.Fatalf("after step %d: %d datatypes cached, want 2 (one a shape)", n, got)
			}
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		if got := mpi.CachedTypes(tr); got != 0 {
			t.Fatalf("%d datatypes left after Close", got)
		}
		step(5)
		if err := tr.Close(); err != nil {
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
