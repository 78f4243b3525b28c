// Package launcher is what a process of an SPMD job can know and do about
// its launcher (mpirun, srun) where MPI cannot help: its rank before MPI
// starts (Rank), MPI_Init and MPI_Finalize bounded so that no rank waits
// forever (Init, Finalize), one message per host for events that ranks
// cannot agree on over MPI (SayOnce), a word when the launcher
// interrupts the job (OnInterrupt), and a job's progress shown as a bar
// only where a person watches, else as log lines (Progress).
//
//	launcher.OnInterrupt(func() int { return rank })
//	if err := launcher.Init(timeout, launch.Rank()); err != nil { ... }
//	defer launcher.Finalize(timeout, rank, failed)
package launcher

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Where ranks cannot talk over MPI (before MPI_Init returns, after
// MPI_Finalize hangs, when the launcher interrupts the job), the ranks of
// one host still share a parent, the launcher (mpirun) or its daemon on
// the host (orted, slurmstepd), and a directory: claimHost makes a marker
// file named for the parent (its pid and start time) and an event, which
// one rank alone can create. Markers of launchers that have ended are
// removed by the next claim.

// Failing is set once this rank knows its job failed (its error is
// being reported, by it or by another rank): an interruption then is the
// launcher ending the job, not the user.
var Failing atomic.Bool

// claimHost claims event what for this rank among the ranks of its host
// and job, and reports whether this rank was first.
func claimHost(what string) bool {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("m2n-refit-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return true // nowhere to coordinate: speak
	}
	key := hostKey()
	olds, _ := filepath.Glob(filepath.Join(dir, "*-*-*"))
	for _, old := range olds {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(old), "%d-", &pid); err == nil && !strings.HasPrefix(filepath.Base(old), fmt.Sprintf("%d-%s-", pid, startTime(pid))) {
			_ = os.Remove(old) // its launcher has ended
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, key+"-"+what), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return os.IsNotExist(err) // held by another rank: it speaks
	}
	return f.Close() == nil
}

// claimed reports whether a rank of this host and job claimed what.
func claimed(what string) bool {
	_, err := os.Stat(filepath.Join(os.TempDir(), fmt.Sprintf("m2n-refit-%d", os.Getuid()), hostKey()+"-"+what))
	return err == nil
}

// hostKey names this job on this host: its launcher's pid and start time
// (every rank of the host shares them); a process no launcher started is
// a job of its own.
func hostKey() string {
	pid := os.Getppid()
	if !Launched {
		pid = os.Getpid()
	}
	return fmt.Sprintf("%d-%s", pid, startTime(pid))
}

// startTime returns process pid's start time (in clock ticks since boot,
// from /proc), which tells it from a later process of the same pid; "0"
// where it cannot be read.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "0"
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19] // field 22 of stat; f[0] is field 3
		}
	}
	return "0"
}

// SayOnce prints "program: msg" on stderr unless another rank of this job on
// this host said something for the event what first; it reports whether
// it printed. Job-ending messages are marked as spoken, so that a
// launcher tearing the job down after them is not taken for an
// interruption.
func SayOnce(what, msg string) bool {
	if !claimHost(what) {
		return false
	}
	Spoke()
	fmt.Fprintf(os.Stderr, "%s: %s\n", Program, msg)
	return true
}

// Spoke marks that a rank of this host reported the end of the job (a
// program calls it before it prints a job-ending message of its own).
func Spoke() { claimHost("spoke") }

// LauncherStopped describes this process's parent when it is stopped
// (SIGSTOP, a debugger, ^Z of mpirun in a shell): the launcher that must
// take part in MPI_Finalize cannot; "" when it runs or there is none.
func LauncherStopped() string {
	if !Launched {
		return ""
	}
	return ProcessStopped(os.Getppid(), "the launcher")
}

// ProcessStopped describes process pid, as what, when it is stopped; ""
// when it runs or cannot be read.
func ProcessStopped(pid int, what string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || shut < open || len(s) < shut+3 {
		return ""
	}
	if state := s[shut+2]; state != 'T' && state != 't' {
		return ""
	}
	return fmt.Sprintf("%s (%s, pid %d) is stopped", what, s[open+1:shut], pid)
}

// interruptions are the signals a launcher sends its ranks when it is
// interrupted (mpirun: SIGTERM after ^C or its own SIGTERM; srun: SIGINT
// and SIGTERM), and a terminal's ^C of a rank started alone.
var interruptions = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// OnInterrupt makes an interrupted job say so once (one rank per host:
// "interrupted (terminated, from the launcher mpirun); ending the job"),
// then end with 128 + the signal: without it a ^C of mpirun ended every
// rank in a second with no word. rank gives this process's rank for the
// message.
func OnInterrupt(rank func() int) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, interruptions...)
	go func() {
		sig := <-c
		// a launcher that ends a failed job sends the same signal: a rank
		// that knows the job failed, whose host reported the failure, or
		// whose peers are going, is quiet.
		time.Sleep(300 * time.Millisecond)
		if !Failing.Load() && !claimed("spoke") && (!Launched || localRanksAlive()) {
			SayOnce("interrupted", fmt.Sprintf("rank %d: interrupted (%v%s); ending the job", rank(), sig, fromLauncher()))
		}
		code := 128
		if s, ok := sig.(syscall.Signal); ok {
			code += int(s)
		}
		os.Exit(code)
	}()
}

// localRanksAlive reports whether every rank the launcher started on
// this host is still its child: a launcher sends the same SIGTERM when it
// is interrupted (every rank alive) as when it ends a job because a rank
// ended (it reaped that rank first, and has said so itself). Only
// OpenMPI says how many ranks a host has; elsewhere it reports false.
func localRanksAlive() bool {
	want, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
	if err != nil || want < 1 {
		return false
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", os.Getppid()))
	kids := map[string]bool{}
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, pid := range strings.Fields(string(b)) {
			kids[pid] = true
		}
	}
	return len(kids) >= want
}

// fromLauncher says where an interruption came from: the launcher, when
// one started this process.
func fromLauncher() string {
	if !Launched {
		return ""
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(os.Getppid()) + "/comm"); err == nil {
		return ", from the launcher " + strings.TrimSpace(string(b))
	}
	return ", from the launcher"
}
