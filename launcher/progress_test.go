package launcher

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestProgressLines: without a bar, a job logs nothing in its first 2 s,
// then a line at every new tenth (and none for the same tenth again);
// a nil Progress (an empty job) shows nothing.
func TestProgressLines(t *testing.T) {
	if p := NewProgress("empty", 0, "steps", zerolog.Nop()); p != nil {
		t.Fatalf("an empty job has progress %v", p)
	}
	var nilP *Progress
	nilP.Set(1)
	nilP.Finish()

	var out bytes.Buffer
	p := NewProgress("job", 10, "steps", zerolog.New(&out))
	p.bar = nil // log lines, as under a launcher
	p.Set(5)
	if out.Len() != 0 {
		t.Fatalf("a job younger than 2 s logged %q", out.String())
	}
	p.start = time.Now().Add(-progressQuiet)
	p.Set(5)
	p.Set(5)
	p.Set(12)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"job: 50%"`) || !strings.Contains(lines[1], `"job: 100%"`) || !strings.Contains(lines[1], `"done":10`) {
		t.Errorf("progress lines %q, want 50%% then 100%% (done capped at 10)", lines)
	}
	p.Finish()
}
