package refit

import (
	"context"
	"errors"
	"sync"

	"github.com/m2n-dev/m2n/control"
)

// Runtime is the step runtime of one group of ranks: it prepares the
// group's calls, numbering them as it goes (every rank prepares the same
// calls in the same order, so a call's number is its identity on every
// rank), and runs one step of one call at a time, whichever goroutines
// ask. A rank in several pipeline stages has one group, and one Runtime,
// per stage; those run concurrently.
type Runtime struct {
	g        control.Group
	mu       sync.Mutex    // held for a step, begin to end, and for a Prepare
	prepared int           // the calls prepared so far: the last one's number
	open     map[int]*Call // the calls not closed yet, by number
	launched *Call         // the call whose launched step no Wait has ended
}

// New returns the runtime of group g.
func New(g control.Group) *Runtime { return &Runtime{g: g, open: map[int]*Call{}} }

// Close closes every call of the runtime not closed yet (Call.Close), and
// returns their errors, joined.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	open := make([]*Call, 0, len(rt.open))
	for _, c := range rt.open {
		open = append(open, c)
	}
	rt.mu.Unlock()
	var errs []error
	for _, c := range open {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// endLaunched ends the step Launch queued on any call of the group, so
// that a new step of another call can begin.
func (rt *Runtime) endLaunched(ctx context.Context) error {
	if rt.launched == nil {
		return nil
	}
	_, err := rt.launched.endLaunched(ctx)
	return err
}
