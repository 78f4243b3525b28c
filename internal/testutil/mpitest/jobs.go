package mpitest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/mpi"
)

// Separate jobs that meet through MPI_Comm_accept/MPI_Comm_connect (the
// two-jobs session of package session). OpenMPI 4.1 connects two mpirun
// invocations only through an ompi-server that both were pointed at, and
// only over a transport that reaches across jobs (tcp: vader alone gives
// "BTLs attempted: vader self"). OmpiServer starts the server; StartJob
// launches one job of a test, with those options.

// OmpiServer starts an ompi-server for the test (stopped at its end) and
// returns the file holding its URI, for StartJob. In a child job it
// starts nothing and returns "".
func OmpiServer(t *testing.T) string {
	t.Helper()
	if InChild() {
		return ""
	}
	Require(t)
	uri := filepath.Join(t.TempDir(), "ompi-server.uri")
	cmd := exec.Command("ompi-server", "--no-daemonize", "--report-uri", uri)
	cmd.Env = Env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("mpitest: starting ompi-server (from openmpi-bin): %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, err := os.ReadFile(uri); err == nil && strings.Contains(string(b), "tcp") {
			return uri
		}
		if time.Now().After(deadline) {
			t.Fatalf("mpitest: ompi-server wrote no URI to %s within 10s; its output:\n%s", uri, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Job is a job that StartJob launched: Wait returns its output and error
// as Output does.
type Job struct {
	name string
	done chan struct{}
	out  string
	err  error
}

// StartJob launches body on np ranks as one job of its own, named name
// within the test, through the ompi-server of uri (OmpiServer), with env
// added to its environment, and returns at once. In that job's child
// processes it runs body instead (and returns nil); in other children it
// does nothing and returns nil, so a test returns early when InChild.
func StartJob(t *testing.T, uri, name string, np int, env []string, body func(t T, c *mpi.Comm)) *Job {
	t.Helper()
	id := t.Name() + "#job:" + name
	if cur, ok := os.LookupEnv(childEnv); ok {
		if cur == id {
			runChild(t, body)
		}
		return nil
	}
	timeout, err := jobTimeout(t)
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{name: name, done: make(chan struct{})}
	started := make(chan *exec.Cmd, 1)
	go func() {
		defer close(j.done)
		j.out, j.err = launchWith(np, id, runPattern(t.Name()), timeout, env, func(cmd *exec.Cmd) {
			cmd.Args = JobArgs(cmd.Args, uri)
			started <- cmd
		})
	}()
	// a test that ends early (t.Fatal) must not leave the job running: its
	// ranks would wait out their own bounds, taking the machine's cores.
	t.Cleanup(func() {
		select {
		case <-j.done:
			return
		case <-time.After(2 * time.Second):
		}
		select {
		case cmd := <-started:
			if cmd.Process != nil {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		default:
		}
		<-j.done
	})
	return j
}

// JobArgs rewrites an mpirun command line (cmd.Args of Command) for a job
// that connects to other jobs through the ompi-server of uri: the tcp BTL
// beside self and vader, and --ompi-server file:uri.
func JobArgs(args []string, uri string) []string {
	out := append([]string(nil), args[:1]...)
	out = append(out, "--ompi-server", "file:"+uri)
	for i := 1; i < len(args); i++ {
		out = append(out, args[i])
		if args[i] == "--mca" && i+2 < len(args) && args[i+1] == "btl" && !strings.Contains(args[i+2], "tcp") {
			out = append(out, args[i+1], args[i+2]+",tcp")
			i += 2
		}
	}
	return out
}

// StartCommand starts the program args under mpirun with np ranks as a job
// of its own that connects to others through the ompi-server of uri
// (JobArgs), its output (stdout and stderr) gathered in the returned
// buffer; it kills the job after limit.
func StartCommand(t testing.TB, uri string, np int, limit time.Duration, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd, err := Command(np, args...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Args = JobArgs(cmd.Args, uri)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	return cmd, &out
}

// Wait waits for the job to end and returns its rank-tagged output and
// error (nil only if every rank's body passed).
func (j *Job) Wait() (string, error) {
	if j == nil {
		return "", fmt.Errorf("mpitest: no job")
	}
	<-j.done
	return j.out, j.err
}
