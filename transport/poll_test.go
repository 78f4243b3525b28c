package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/transport"
)

// TestPoller checks the rate of a wait's poll: the first Check polls with
// since 0, a Check within PollEvery of it does not poll, a later one polls
// with the time since, and the poll's error comes back.
func TestPoller(t *testing.T) {
	if transport.NewPoller(context.Background()) != nil {
		t.Fatal("a Poller from a context without a poll")
	}
	var nilPoller *transport.Poller
	if err := nilPoller.Check(); err != nil {
		t.Fatalf("a nil Poller's Check = %v", err)
	}
	var calls []time.Duration
	fail := errors.New("peer gone")
	ctx := transport.WithPoll(context.Background(), func(since time.Duration) error {
		calls = append(calls, since)
		if len(calls) == 2 {
			return fail
		}
		return nil
	})
	p := transport.NewPoller(ctx)
	if p == nil {
		t.Fatal("no Poller from a context with a poll")
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil || len(calls) != 1 {
		t.Fatalf("a Check right after polled again (%v, calls %v)", err, calls)
	}
	time.Sleep(2 * transport.PollEvery)
	if err := p.Check(); err != fail {
		t.Fatalf("Check = %v, want the poll's error", err)
	}
	if len(calls) != 2 || calls[0] != 0 || calls[1] < 2*transport.PollEvery {
		t.Fatalf("poll calls (since) = %v, want [0, >= %v]", calls, 2*transport.PollEvery)
	}
}
