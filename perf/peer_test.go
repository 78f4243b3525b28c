package perf

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunTorchPeerParses runs a stand-in peer that prints what the torch
// script prints and checks the figures parsed; without python3 it checks
// that the error says so.
func TestRunTorchPeerParses(t *testing.T) {
	fake := []byte(`import sys
print("torch peer, 1 GiB bf16 16384x32768, 128x128 blocks, median of 20")
print("  copy_ of the bf16 bytes:         507.0 us (2118 GB/s)")
print("  eager block quantize:           7000.5 us (7.2% of the copy)")
print("  torch.compile block quantize:    605.2 us (83.8% of the copy; same bytes as eager: False)")
`)
	dir := t.TempDir()
	// a python3 that has a "torch" whose CUDA is available
	if err := os.WriteFile(filepath.Join(dir, "torch.py"), []byte("class cuda:\n    @staticmethod\n    def is_available(): return True\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	p, err := RunTorchPeer(fake, 16384, 32768, time.Minute)
	if errors.Is(err, ErrNoPeer) {
		t.Skipf("no python3 here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.Copy != 507*time.Microsecond || p.Eager != 7000500*time.Nanosecond || p.Compile != 605200*time.Nanosecond || p.SameAsEager != "False" {
		t.Errorf("parsed %+v", p)
	}
	t.Setenv("PATH", dir) // no python3
	if _, err := RunTorchPeer(fake, 128, 128, time.Minute); !errors.Is(err, ErrNoPeer) {
		t.Errorf("without python3: %v, want ErrNoPeer", err)
	}
	if _, err := RunTorchPeer(fake, 100, 128, time.Minute); err == nil {
		t.Error("a shape of partial blocks accepted")
	}
}
