package launcher

import (
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressQuiet is how long a job runs before it logs progress lines,
// and progressEvery the longest it goes without one after that (a tenth
// of a billion iterations takes hours).
const (
	progressQuiet = 2 * time.Second
	progressEvery = 30 * time.Second
)

// Progress shows how far a job of total units is: a progress bar on
// stderr only where a person watches it, when stderr is a terminal and no
// launcher started the process (a launcher forwards output through pipes,
// and OpenMPI through a pseudo-terminal even when it writes to a file);
// elsewhere a progress line logged at every tenth of the job, and at least
// every 30 s, once the job has run for 2 s, so that short jobs stay quiet.
// A nil *Progress shows nothing.
type Progress struct {
	bar   *progressbar.ProgressBar
	log   zerolog.Logger
	what  string
	unit  string
	total int64
	start time.Time
	tenth int64     // the last tenth logged
	last  time.Time // when the last line was logged
}

// NewProgress returns the progress of total units (named unit in log
// lines; "bytes" shows bytes on the bar) of what, logging to log, or nil
// for an empty job.
func NewProgress(what string, total int64, unit string, log zerolog.Logger) *Progress {
	if total <= 0 {
		return nil
	}
	p := &Progress{log: log, what: what, unit: unit, total: total, start: time.Now()}
	if !Launched && term.IsTerminal(int(os.Stderr.Fd())) {
		opts := []progressbar.Option{progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100 * time.Millisecond)}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		}
		p.bar = progressbar.NewOptions64(total, opts...)
	}
	return p
}

// Set records that done units of the job are done.
func (p *Progress) Set(done int64) {
	if p == nil {
		return
	}
	done = min(done, p.total)
	if p.bar != nil {
		_ = p.bar.Set64(done)
		return
	}
	tenth := 10 * done / p.total
	if time.Since(p.start) < progressQuiet || (tenth <= p.tenth && time.Since(p.last) < progressEvery) {
		return
	}
	p.tenth, p.last = tenth, time.Now()
	p.log.Info().Int64("done", done).Int64("of", p.total).Str("unit", p.unit).Dur("elapsed", time.Since(p.start)).
		Msg(fmt.Sprintf("%s: %d%%", p.what, 10*tenth))
}

// Finish ends the bar's line.
func (p *Progress) Finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}
