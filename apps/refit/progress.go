package main

import (
	"github.com/m2n-dev/m2n/launcher"
)

// progressHelp is the rule, for --help.
const progressHelp = `Progress: rank 0 draws a progress bar on stderr only where a person
watches it, when stderr is a terminal and no launcher (mpirun, srun)
started the process (a launcher forwards output through pipes, and
OpenMPI through a pseudo-terminal even when it writes to a file);
elsewhere it logs a progress line at every tenth of the job, and at least
every 30 s, once the job has run for 2 s, so that short jobs stay quiet.
--json turns both off.`

// newProgress returns rank 0's progress over total units (named unit in
// log lines) of what (launcher.Progress, by the rule of progressHelp), or
// nil on other ranks, with --json, or for an empty job.
func (j *job) newProgress(what string, total int64, unit string, asJSON bool) *launcher.Progress {
	if j.Rank != 0 || asJSON {
		return nil
	}
	return launcher.NewProgress(what, total, unit, j.Log)
}
