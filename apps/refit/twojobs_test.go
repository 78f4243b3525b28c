package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// startLinkJob starts one refit job of a two-job session through the
// ompi-server of uri.
func startLinkJob(t *testing.T, uri string, a app) *running {
	t.Helper()
	cmd := launchCmd(t, nil, a)
	cmd.Args = mpitest.JobArgs(cmd.Args, uri)
	return startCmd(t, cmd)
}

// TestSyncTwoJobs runs `refit sync --listen` as a 2-rank trainer job and,
// one after another: a job connecting to a port file that does not exist
// and one presenting a wrong token, each failing at once with one message
// (the trainer logs the refusal and accepts again); then `refit sync
// --connect` as a 2-rank generator job, which joins and syncs the model
// with every element checked.
func TestSyncTwoJobs(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	dir := t.TempDir()
	port := filepath.Join(dir, "trainer.port")
	args := strings.Fields("sync --model deepseek-v3 --scale 64 --layers 2 --train tp=1,ep=2,dp=2 --gen tp=2 --check --iters 2 --timeout 20s")
	const limit = 20*time.Second + margin
	trainer := startLinkJob(t, uri, app{np: 2, args: append(args, "--listen", port)})
	var pf map[string]any
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(port); err == nil && json.Unmarshal(b, &pf) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trainer wrote no port file at %s: %v", port, trainer.wait(t, limit))
		}
	}
	o := startLinkJob(t, uri, app{np: 2, args: append(args, "--connect", filepath.Join(dir, "missing.port"))}).wait(t, limit)
	oneMessage(t, o, margin, "missing.port does not exist")
	pf["token"] = strings.Repeat("f", 64)
	b, _ := json.Marshal(pf)
	if err := os.WriteFile(filepath.Join(dir, "wrong.port"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	o = startLinkJob(t, uri, app{np: 2, args: append(args, "--connect", filepath.Join(dir, "wrong.port"))}).wait(t, limit)
	oneMessage(t, o, margin, "wrong job token", "wrong.port")
	gen := startLinkJob(t, uri, app{np: 2, args: append(args, "--connect", port)}).wait(t, limit)
	tr := trainer.wait(t, limit)
	for role, o := range map[string]outcome{"trainer": tr, "generator": gen} {
		if !strings.Contains(o.stdout, "two jobs ("+role+"): joined in ") || !strings.Contains(o.stdout, "model prepared in") {
			t.Errorf("%s: no join and prepare line:\n%v", role, o)
		}
	}
	if gen.code != 0 || len(messages(gen)) != 0 {
		t.Errorf("generator job: %v", gen)
	}
	if tr.code != 0 || !strings.Contains(tr.stdout, "check passed") || !strings.Contains(tr.stdout, "world 4") {
		t.Errorf("trainer job: %v", tr)
	}
	if msgs := messages(tr); len(msgs) != 1 || !strings.Contains(msgs[0], "refused a job") || !strings.Contains(msgs[0], "wrong job token") {
		t.Errorf("trainer's messages %q, want the one refusal", msgs)
	}
	noCrash(t, gen)
	noCrash(t, tr)
	t.Logf("trainer:\n%v\ngenerator:\n%v", tr, gen)
}

// TestSyncTwoJobsDisagree: a generator job whose flags differ from the
// trainer's (--iters) fails on both jobs at once, with one message per
// job naming the flag and both values.
func TestSyncTwoJobsDisagree(t *testing.T) {
	uri := mpitest.OmpiServer(t)
	port := filepath.Join(t.TempDir(), "trainer.port")
	args := strings.Fields("sync --model deepseek-v3 --scale 64 --layers 2 --train tp=1,pp=2 --gen tp=2 --check --timeout 20s")
	const limit = 20*time.Second + margin
	trainer := startLinkJob(t, uri, app{np: 2, args: append(args, "--iters", "2", "--listen", port)})
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(port); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trainer wrote no port file at %s: %v", port, trainer.wait(t, limit))
		}
	}
	gen := startLinkJob(t, uri, app{np: 2, args: append(args, "--iters", "3", "--connect", port)}).wait(t, limit)
	tr := trainer.wait(t, limit)
	for _, o := range []outcome{tr, gen} {
		oneMessage(t, o, limit, "ranks disagree: rank 2 has flag --iters 3, rank 0 has 2")
	}
}
