package session

import (
	"context"
	"testing"
)

// BenchmarkWatch is what the watcher of a host-driven Run costs per Run
// (a goroutine, a ticker and a cancellable context, started and stopped):
// the cost a replay's own polling, and a one-rank session, avoid.
func BenchmarkWatch(b *testing.B) {
	c := &mpiControl{}
	ctx := context.Background()
	for b.Loop() {
		_, stop := c.watch(ctx)
		stop()
	}
}

// BenchmarkAlone is a collective of a one-rank session.
func BenchmarkAlone(b *testing.B) {
	c := &mpiControl{size: 1}
	ctx := context.Background()
	send, recv := []byte{1}, []byte{0}
	for b.Loop() {
		if err := c.Allgather(ctx, send, recv); err != nil {
			b.Fatal(err)
		}
	}
}
