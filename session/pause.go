package session

import (
	"fmt"
	"sync"
	"time"
)

// stoppedError is the cause of an abort by a rank whose process did not
// run for as long as the timeout while it moved data (SIGSTOP, a
// debugger, a starved host; watch sees it): the round it was in has timed
// out and its peers have given up waiting for it, so it names itself
// rather than the peers it was waiting for. (A collective's wait does
// not count such a pause at all.)
type stoppedError struct {
	rank         int
	gap, timeout time.Duration
}

func (e *stoppedError) Error() string {
	return fmt.Sprintf("rank %d: %s %v (SIGSTOP, a debugger or a starved host), as long as the %v timeout: its peers gave up waiting for it",
		e.rank, stoppedMark, e.gap.Round(time.Millisecond), e.timeout)
}

// stoppedMark is in every stoppedError's text (standing reads it).
const stoppedMark = "this process was stopped for"

// wereStopped ends the phase of a timeout whose peers reported at roll
// call that they had not run for as long as the timeout.
const wereStopped = " (the ranks named were stopped: they did not run for as long as the timeout)"

// noteGap records a pause of gap that a wait of this rank saw end at now.
func (c *mpiControl) noteGap(now time.Time, gap time.Duration) {
	c.mu.Lock()
	c.frozenAt, c.frozenFor = now, gap
	c.mu.Unlock()
}

// recentGap is the longest pause this process made that ended within the
// last two timeouts (a roll call's asker waits for one), as this rank's
// waits saw it (noteGap) or the process's pause watch (pauses) did, else
// 0; the caller holds c.mu.
func (c *mpiControl) recentGap() time.Duration {
	gap := time.Duration(0)
	if time.Since(c.frozenAt) <= 2*c.timeout {
		gap = c.frozenFor
	}
	if at, d := pauses.last(); time.Since(at) <= 2*c.timeout {
		gap = max(gap, d)
	}
	return gap
}

type pauseWatch struct {
	once sync.Once
	mu   sync.Mutex
	at   time.Time     // when the last pause ended
	d    time.Duration // how long it was
	tick time.Time     // the last tick
}

func (p *pauseWatch) start() {
	p.once.Do(func() {
		go func() {
			const tick = 50 * time.Millisecond
			t := time.NewTicker(tick)
			last := time.Now()
			for now := range t.C {
				p.mu.Lock()
				if gap := now.Sub(last); gap > frozenGap {
					p.at, p.d = now, gap
				}
				p.tick, last = now, now
				p.mu.Unlock()
			}
		}()
	})
}

// last returns when the last pause ended and how long it was: one that
// has just ended, before the watch ticked again, counts too.
func (p *pauseWatch) last() (time.Time, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if gap := now.Sub(p.tick); !p.tick.IsZero() && gap > frozenGap && gap > p.d {
		return now, gap
	}
	return p.at, p.d
}
