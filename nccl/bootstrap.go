package nccl

import (
	"context"
	"errors"
	"fmt"
)

// Broadcaster is what Bootstrap needs from the launcher's communicator
// (m2n's *mpi.Comm has these methods): this process's rank, the number of
// ranks, and a broadcast of buf from root to every rank.
type Broadcaster interface {
	Rank() int
	Size() int
	Bcast(buf []byte, root int) error
}

// Bootstrap creates an NCCL communicator over the ranks of b, rank for
// rank: rank 0 makes the unique id and broadcasts it, then every rank calls
// InitRank. A failure on rank 0 is broadcast too, so every rank returns an
// error rather than waiting. With cfg.NonBlocking it waits for the
// communicator to be ready, at most cfg.InitTimeout (if set), and aborts it
// on timeout. Every rank of b must call it.
//
// A rank that fails before InitRank (no NCCL there) leaves the others in
// NCCL's initialisation; a non-blocking cfg with an InitTimeout bounds that
// wait.
func Bootstrap(b Broadcaster, cfg *Config) (*Comm, error) {
	rank, size := b.Rank(), b.Size()
	var msg [1 + len(UniqueID{})]byte
	var idErr error
	if rank == 0 {
		var id UniqueID
		if id, idErr = GetUniqueID(); idErr == nil {
			msg[0] = 1
			copy(msg[1:], id[:])
		}
	}
	if err := b.Bcast(msg[:], 0); err != nil {
		return nil, fmt.Errorf("nccl: Bootstrap: broadcasting the unique id: %w", err)
	}
	if msg[0] != 1 {
		if idErr != nil {
			return nil, fmt.Errorf("nccl: Bootstrap: %w", idErr)
		}
		return nil, errors.New("nccl: Bootstrap: rank 0 could not create a unique id")
	}
	var id UniqueID
	copy(id[:], msg[1:])
	c, err := InitRank(size, id, rank, cfg)
	if err != nil {
		return nil, fmt.Errorf("nccl: Bootstrap: rank %d of %d: %w", rank, size, err)
	}
	if cfg != nil && cfg.NonBlocking {
		ctx := context.Background()
		if cfg.InitTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.InitTimeout)
			defer cancel()
		}
		if err := c.WaitReady(ctx); err != nil {
			c.Abort()
			return nil, fmt.Errorf("nccl: Bootstrap: rank %d of %d: %w", rank, size, err)
		}
	}
	return c, nil
}
