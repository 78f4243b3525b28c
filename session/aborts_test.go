package session

import (
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
)

// TestSaysMore orders abort causes as FirstToAbort promises: a roll call's
// silent ranks, then other failures, then round timeouts by how few peers
// they blame, then out-of-step roll calls; the lowest rank among equals.
func TestSaysMore(t *testing.T) {
	round := func(rank int, peers ...int) *control.AbortError {
		return &control.AbortError{Rank: rank, Cause: &control.TimeoutError{Rank: rank, After: 4 * time.Second, Peers: peers}}
	}
	roll := func(rank int, phase string) *control.AbortError {
		return &control.AbortError{Rank: rank, Cause: &control.TimeoutError{Rank: rank, After: 4 * time.Second, Peers: []int{5}, Phase: phase}}
	}
	other := &control.AbortError{Rank: 6, Cause: errors.New("transport failed")}
	for _, c := range []struct {
		name string
		a, b *control.AbortError
		want bool
	}{
		{"fewer peers blamed", round(7, 5), round(4, 5, 7), true},
		{"more peers blamed", round(4, 5, 7), round(7, 5), false},
		{"equal: lower rank", round(4, 5), round(6, 5), true},
		{"roll call before a round", roll(7, "prepare"), round(0, 5), true},
		{"other failure before a round", other, round(0, 5), true},
		{"round before out of step", round(7, 5, 6), roll(0, "prepare"+outOfStep), true},
	} {
		if got := saysMore(c.a, c.b); got != c.want {
			t.Errorf("%s: saysMore = %v, want %v", c.name, got, c.want)
		}
		if c.want && saysMore(c.b, c.a) {
			t.Errorf("%s: the order is not strict", c.name)
		}
	}
}
