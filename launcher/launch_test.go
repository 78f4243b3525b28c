package launcher

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestProcessStopped: the finalize bound names a stopped launcher (23.8:
// SIGSTOP to mpirun held every rank in MPI_Finalize).
func TestProcessStopped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if got := ProcessStopped(pid, "the launcher"); got != "" {
		t.Errorf("a running process is %q", got)
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	want := fmt.Sprintf("the launcher (sleep, pid %d) is stopped", pid)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ProcessStopped(pid, "the launcher") == want {
			return
		}
	}
	t.Errorf("a stopped process is %q, want %q", ProcessStopped(pid, "the launcher"), want)
}
