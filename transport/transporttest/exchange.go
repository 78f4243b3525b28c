package transporttest

import (
	"context"
	"fmt"

	"github.com/m2n-dev/m2n/transport"
)

// exchangeLen is the length of message k from src to dst in round r: varied,
// sometimes zero, never the same for long.
func exchangeLen(src, dst, r, k int) int64 {
	return int64((src*7+dst*3+r*5+k*11)%29) * 37
}

func exchangeByte(src, dst, r, k, i int) byte {
	return byte(src*31 + dst*17 + r*7 + k*3 + i*13 + 1)
}

// Exchange checks the Transport contract itself, under the executor: a
// number of rounds, two in flight at a time, in each of which every rank
// sends two messages to every rank, itself included, of varied lengths
// (some empty), so that the order in which messages between a pair match
// matters. Every byte received is checked against what its sender wrote.
// Every rank of the transport calls it with the same arguments.
func Exchange(ctx context.Context, env Env, rounds int) error {
	rank, world := env.T.Rank(), env.T.Size()
	type posted struct {
		pending Pending
		recv    []transport.Buffer
		peer    []int
		k       []int
		r       int
		free    []transport.Buffer
	}
	alloc := func(n int64) (transport.Buffer, error) { return env.Mem.Alloc(n) }
	start := func(r int) (posted, error) {
		p := posted{r: r}
		var ops []transport.Op
		for peer := 0; peer < world; peer++ {
			for k := 0; k < 2; k++ {
				n := exchangeLen(peer, rank, r, k)
				b, err := alloc(n)
				if err != nil {
					return p, err
				}
				p.free = append(p.free, b)
				p.recv, p.peer, p.k = append(p.recv, b), append(p.peer, peer), append(p.k, k)
				ops = append(ops, transport.Op{Peer: peer, Buf: b, Len: n})
			}
		}
		for peer := 0; peer < world; peer++ {
			for k := 0; k < 2; k++ {
				n := exchangeLen(rank, peer, r, k)
				host := make([]byte, n)
				for i := range host {
					host[i] = exchangeByte(rank, peer, r, k, i)
				}
				b, err := alloc(n)
				if err != nil {
					return p, err
				}
				p.free = append(p.free, b)
				if err := env.IO.Upload(b, host); err != nil {
					return p, err
				}
				ops = append(ops, transport.Op{Peer: peer, Send: true, Buf: b, Len: n})
			}
		}
		if err := env.Mem.Sync(); err != nil {
			return p, err
		}
		pend, err := env.T.Start(ops)
		p.pending = pend
		return p, err
	}
	finish := func(p posted) error {
		defer func() {
			for _, b := range p.free {
				env.Mem.Free(b)
			}
		}()
		if err := p.pending.Wait(ctx); err != nil {
			return fmt.Errorf("rank %d round %d: %w", rank, p.r, err)
		}
		for i, b := range p.recv {
			got := make([]byte, b.Len())
			if err := env.IO.Download(got, b); err != nil {
				return err
			}
			for j, v := range got {
				if want := exchangeByte(p.peer[i], rank, p.r, p.k[i], j); v != want {
					return fmt.Errorf("rank %d round %d: message %d from rank %d, byte %d is %#x, want %#x",
						rank, p.r, p.k[i], p.peer[i], j, v, want)
				}
			}
		}
		return nil
	}
	var inflight []posted
	for r := 0; r < rounds; r++ {
		p, err := start(r)
		if err != nil {
			return fmt.Errorf("rank %d round %d: %w", rank, r, err)
		}
		inflight = append(inflight, p)
		if len(inflight) == 2 {
			if err := finish(inflight[0]); err != nil {
				return err
			}
			inflight = inflight[1:]
		}
	}
	for _, p := range inflight {
		if err := finish(p); err != nil {
			return err
		}
	}
	return nil
}

// Pending is reshard.Pending, named here for the suite's signatures.
type Pending = transport.Pending
