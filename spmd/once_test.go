package spmd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/rs/zerolog"
)

// order is a session's abort order: the first rank to abort and this
// rank's, in the session.
type order struct{ first, rank int }

func (o *order) FirstToAbort(time.Duration) int { return o.first }
func (o *order) Rank() int                      { return o.rank }

// TestOthersSpeak: a rank stays quiet about an abort only when another
// rank of the session it failed in aborted first; of stages that failed
// together, the job's session picks the one that speaks; without a
// session the abort's own rank decides; errors other than aborts are
// always said.
func TestOthersSpeak(t *testing.T) {
	ab := fmt.Errorf("route flat: %w", &control.AbortError{Rank: 1, Cause: errors.New("timeout")})
	nop := zerolog.Nop()
	for _, c := range []struct {
		name         string
		err          error
		rank         int
		stage, world abortOrder
		want         bool
	}{
		{"not an abort", errors.New("plain"), 3, nil, &order{1, 3}, false},
		{"another aborted first", ab, 3, nil, &order{1, 3}, true},
		{"this rank first", ab, 3, nil, &order{3, 3}, false},
		{"no notice yet", ab, 3, nil, &order{-1, 3}, false},
		{"no session, another's abort", ab, 3, nil, nil, true},
		{"no session, this rank's abort", ab, 1, nil, nil, false},
		{"no session, no rank", fmt.Errorf("%w", &control.AbortError{Rank: -1, Cause: errors.New("x")}), 3, nil, nil, false},
		{"stage: another first", ab, 5, &order{0, 1}, &order{5, 5}, true},
		{"stage first, world names another", ab, 5, &order{1, 1}, &order{4, 5}, true},
		{"stage first, world first", ab, 5, &order{1, 1}, &order{5, 5}, false},
		{"stage first, world silent", ab, 5, &order{1, 1}, &order{-1, 5}, false},
	} {
		if got := othersSpeak(c.err, c.rank, c.stage, c.world, nop); got != c.want {
			t.Errorf("%s: othersSpeak = %v, want %v", c.name, got, c.want)
		}
	}
	// the stage that failed is the job's session itself: asked once.
	w := &order{4, 5}
	if !othersSpeak(ab, 5, w, w, nop) {
		t.Error("the job's session as the failed stage: not quiet")
	}
}

// TestNilJob: the Job of an Init that failed is never quiet and its End
// ends nothing.
func TestNilJob(t *testing.T) {
	var j *Job
	if j.quiet(&control.AbortError{Rank: 1, Cause: errors.New("x")}) {
		t.Error("a nil job is quiet")
	}
	err := errors.New("MPI_Init failed")
	j.End(&err)
	if err.Error() != "MPI_Init failed" {
		t.Errorf("End of a nil job made %v", err)
	}
}
