// Package pace paces the polling loops that wait for a GPU: a host thread
// that checks a stream or an event until the device is done.
//
// Sleeping is the wrong tool for short waits. A Go timer shorter than a
// millisecond fires about a millisecond late on Linux (measured: a 50 µs
// time.After takes 1.0 ms), so a wait that sleeps once its step has run
// 2 ms costs up to half a millisecond more on a 4 ms copy. A Pacer yields
// the processor instead, and sleeps only once the wait has lasted long
// enough that a timer's lateness costs at most 2% of it.
package pace

import (
	"context"
	"runtime"
	"time"
)

// Lateness is how late a short timer fires, at most, in practice.
const Lateness = time.Millisecond

// share is the part of a wait a sleep may add: 1/50, 2%.
const share = 50

// maxSleep bounds one sleep, so a long wait still notices its end quickly.
const maxSleep = 5 * time.Millisecond

// Pacer paces one wait. The zero value is not ready; use Start.
type Pacer struct{ start time.Time }

// Start begins pacing a wait that starts now.
func Start() Pacer { return Pacer{start: time.Now()} }

// Elapsed is how long the wait has lasted.
func (p Pacer) Elapsed() time.Duration { return time.Since(p.start) }

// Pause lets other goroutines run before the next check. Early in a wait
// it yields; once the wait has lasted share×Lateness it sleeps for a
// fiftieth of what has passed (at most maxSleep), or until ctx ends.
func (p Pacer) Pause(ctx context.Context) {
	d := Sleep(time.Since(p.start))
	if d == 0 {
		runtime.Gosched()
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Sleep is how long Pause sleeps after a wait of elapsed: zero (yield)
// until a late timer would cost more than 2% of the wait.
func Sleep(elapsed time.Duration) time.Duration {
	if elapsed < share*Lateness {
		return 0
	}
	return min(elapsed/share, maxSleep)
}
