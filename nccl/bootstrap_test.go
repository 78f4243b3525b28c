package nccl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/nccl"
)

// fakeBcast is a Broadcaster for one rank of a job that exists only in the
// test: Bcast from root 0 delivers root's bytes, which the test sets for
// ranks other than 0.
type fakeBcast struct {
	rank, size int
	root       []byte // what rank 0 broadcasts, as seen by other ranks
	sent       []byte // what this rank passed as root
	err        error
}

func (f *fakeBcast) Rank() int { return f.rank }
func (f *fakeBcast) Size() int { return f.size }
func (f *fakeBcast) Bcast(buf []byte, root int) error {
	if f.err != nil {
		return f.err
	}
	if f.rank == root {
		f.sent = append([]byte(nil), buf...)
		return nil
	}
	copy(buf, f.root)
	return nil
}

// TestBootstrapRootFailure: when rank 0 cannot make an id it says so in the
// broadcast, and the other ranks return an error instead of waiting.
func TestBootstrapRootFailure(t *testing.T) {
	b := &fakeBcast{rank: 1, size: 2, root: make([]byte, 129)}
	_, err := nccl.Bootstrap(b, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 0 could not create a unique id") {
		t.Fatalf("rank 1: %v", err)
	}
	b = &fakeBcast{rank: 1, size: 2, err: errors.New("link down")}
	if _, err := nccl.Bootstrap(b, nil); err == nil || !strings.Contains(err.Error(), "link down") {
		t.Fatalf("broadcast failure: %v", err)
	}
	if nccl.Load() == nil {
		return // rank 0 can make ids here; the GPU tests cover it
	}
	b = &fakeBcast{rank: 0, size: 2}
	_, err = nccl.Bootstrap(b, nil)
	if !errors.Is(err, nccl.ErrNotAvailable) || len(b.sent) != 129 || b.sent[0] != 0 {
		t.Fatalf("rank 0 without NCCL: %v, broadcast %v", err, b.sent)
	}
	t.Logf("rank 0: %v", err)
}
