package nvrtc

import (
	"errors"
	"strings"
	"testing"
)

func TestCandidatesOverride(t *testing.T) {
	t.Setenv("M2N_NVRTC_PATH", "/opt/x/libnvrtc.so.99")
	if c := Candidates(); len(c) != 1 || c[0] != "/opt/x/libnvrtc.so.99" {
		t.Fatalf("Candidates with override = %v", c)
	}
	t.Setenv("M2N_NVRTC_PATH", "")
	c := Candidates()
	if c[0] != "libnvrtc.so.13" || !strings.HasPrefix(c[len(c)-1], "/") {
		t.Fatalf("Candidates = %v", c)
	}
}

// TestCompile needs NVRTC but no GPU: PTX for a virtual architecture.
func TestCompile(t *testing.T) {
	if err := Load(); err != nil {
		if errors.Is(err, ErrNotAvailable) {
			t.Skipf("nvrtc: %v", err)
		}
		t.Fatal(err)
	}
	src := `#include "k.h"
extern "C" __global__ void k(int *p) { p[threadIdx.x] = K; }`
	ptx, err := Compile(src, "k.cu", []Header{{"k.h", "#define K 42\n"}}, []string{"--gpu-architecture=compute_90"}, PTX)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ptx), ".entry k") || !strings.Contains(string(ptx), "42") {
		t.Errorf("PTX lacks the kernel:\n%s", ptx)
	}
	_, err = Compile("garbage", "bad.cu", nil, []string{"--gpu-architecture=compute_90"}, PTX)
	var e *Error
	if !errors.As(err, &e) || e.Op != "nvrtcCompileProgram" || e.Log == "" {
		t.Errorf("compiling garbage: %v", err)
	}
}
