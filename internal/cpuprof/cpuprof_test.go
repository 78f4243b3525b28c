package cpuprof

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStart: an empty path profiles nothing; a path gets a profile that
// go tool pprof can read (non-empty once stopped); a path that cannot be
// created is refused, and no profile is left running after it.
func TestStart(t *testing.T) {
	stop, err := Start("")
	if err != nil || stop() != nil {
		t.Fatalf("Start(\"\"): %v", err)
	}
	path := filepath.Join(t.TempDir(), "cpu.out")
	stop, err = Start(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("the profile %s: %v, %v", path, st, err)
	}
	if _, err := Start(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.out")); err == nil {
		t.Fatal("a profile in a missing directory was started")
	}
	// a second profile starts: none was left running
	stop, err = Start(filepath.Join(t.TempDir(), "again.out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
