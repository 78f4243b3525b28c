package perf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTorchPeerParses runs a stand-in peer that prints what the torch
// script prints and checks the figures parsed; without python3 it checks
// that the error says so.
func TestTorchPeerParses(t *testing.T) {
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
	p, err := runTorchPeer(fake, 16384, 32768, time.Minute)
	if errors.Is(err, errNoPeer) {
		t.Skipf("no python3 here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.Copy != 507*time.Microsecond || p.Eager != 7000500*time.Nanosecond || p.Compile != 605200*time.Nanosecond || p.SameAsEager != "False" {
		t.Errorf("parsed %+v", p)
	}
	t.Setenv("PATH", dir) // no python3
	if _, err := runTorchPeer(fake, 128, 128, time.Minute); !errors.Is(err, errNoPeer) {
		t.Errorf("without python3: %v, want errNoPeer", err)
	}
	if _, err := runTorchPeer(fake, 100, 128, time.Minute); err == nil {
		t.Error("a shape of partial blocks accepted")
	}
}

// TestWriteTorchPeer: the ratio of torch.compile's time to each stage's,
// from the stand-in peer's figure; bytes that are not whole rows of 64 KiB
// say so instead of running it.
func TestWriteTorchPeer(t *testing.T) {
	fake := []byte(`print("  copy_ of the bf16 bytes:         507.0 us")
print("  eager block quantize:           7000.5 us")
print("  torch.compile block quantize:    605.2 us (same bytes as eager: True)")
`)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "torch.py"), []byte("class cuda:\n    @staticmethod\n    def is_available(): return True\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	res := []QuantResult{{RowBytes: 65536, Op: "pack", Median: time.Millisecond}, {RowBytes: 65536, Op: "stage-fused", Median: 302600 * time.Nanosecond}}
	var b strings.Builder
	WriteTorchPeer(&b, fake, 1<<30, res)
	if strings.Contains(b.String(), errNoPeer.Error()) {
		t.Skipf("no python3 here: %s", b.String())
	}
	if !strings.Contains(b.String(), "stage-fused       torch.compile / m2n = 2.00x") || strings.Contains(b.String(), " pack ") {
		t.Errorf("got %q, want the fused stage's ratio 2.00x and no row for pack", b.String())
	}
	b.Reset()
	WriteTorchPeer(&b, fake, 1<<20, res)
	if !strings.Contains(b.String(), "not run: 1 MiB") {
		t.Errorf("1 MiB: got %q", b.String())
	}
}
