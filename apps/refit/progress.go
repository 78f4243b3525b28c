package main

import (
	"fmt"
	"os"
	"time"

	"github.com/m2n-dev/m2n/launcher"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressHelp is the rule, for --help.
const progressHelp = `Progress: rank 0 draws a progress bar on stderr only where a person
watches it, when stderr is a terminal and no launcher (mpirun, srun)
started the process (a launcher forwards output through pipes, and
OpenMPI through a pseudo-terminal even when it writes to a file);
elsewhere it logs a progress line at every tenth of the job, and at least
every 30 s, once the job has run for 2 s, so that short jobs stay quiet.
--json turns both off.`

// progressQuiet is how long a job runs before it logs progress lines,
// and progressEvery the longest it goes without one after that (a tenth
// of a billion iterations takes hours).
const (
	progressQuiet = 2 * time.Second
	progressEvery = 30 * time.Second
)

// progress shows how far a job of total units is, on rank 0, by the rule
// of progressHelp. A nil *progress shows nothing.
type progress struct {
	bar   *progressbar.ProgressBar
	log   zerolog.Logger
	what  string
	unit  string
	total int64
	start time.Time
	tenth int64     // the last tenth logged
	last  time.Time // when the last line was logged
}

// newProgress returns rank 0's progress over total units (named unit in
// log lines) of what, or nil on other ranks, with --json, or for an empty
// job.
func (j *job) newProgress(what string, total int64, unit string, asJSON bool) *progress {
	if j.rank != 0 || asJSON || total <= 0 {
		return nil
	}
	p := &progress{log: j.log, what: what, unit: unit, total: total, start: time.Now()}
	if !launcher.Launched && term.IsTerminal(int(os.Stderr.Fd())) {
		opts := []progressbar.Option{progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100 * time.Millisecond)}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		}
		p.bar = progressbar.NewOptions64(total, opts...)
	}
	return p
}

// set records that done units of the job are done.
func (p *progress) set(done int64) {
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

// finish ends the bar's line.
func (p *progress) finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}
