package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/cuda/nvrtc"
)

// TestKernelSourceCompiles compiles the kernels' source with NVRTC, as a
// GPU run does at start, for Hopper (PTX and a CUBIN): it needs NVRTC but no
// GPU, and skips, saying why, where NVRTC cannot be opened
// (M2N_NVRTC_PATH names the library).
func TestKernelSourceCompiles(t *testing.T) {
	if err := nvrtc.Load(); err != nil {
		if errors.Is(err, nvrtc.ErrNotAvailable) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	ptx, err := kernelImage(9, 0, nvrtc.PTX)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{"m2n_batch", "m2n_copy16", "m2n_copy1"}, quantKernels()...) {
		if !strings.Contains(string(ptx), ".entry "+k) {
			t.Errorf("the PTX has no kernel %s", k)
		}
	}
	if _, err := kernelImage(9, 0, nvrtc.CUBIN); err != nil {
		t.Fatal(err)
	}
	major, minor, _ := nvrtc.Version()
	t.Logf("NVRTC %d.%d: the kernels compile for sm_90 (%d bytes of PTX)", major, minor, len(ptx))
}
