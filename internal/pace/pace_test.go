package pace

import (
	"testing"
	"time"
)

func TestSleepIsAShareOfTheWait(t *testing.T) {
	for _, c := range []struct{ elapsed, want time.Duration }{
		{0, 0},
		{2 * time.Millisecond, 0},
		{49 * time.Millisecond, 0},
		{50 * time.Millisecond, time.Millisecond},
		{100 * time.Millisecond, 2 * time.Millisecond},
		{time.Minute, maxSleep},
	} {
		if got := Sleep(c.elapsed); got != c.want {
			t.Errorf("Sleep(%v) = %v, want %v", c.elapsed, got, c.want)
		}
	}
}
