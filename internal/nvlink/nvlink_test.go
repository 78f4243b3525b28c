//go:build !nonvml

package nvlink

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
)

func TestDomainKeyFromFabricInfo(t *testing.T) {
	uuid := [16]uint8{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		f    fabricInfo
		want string
	}{
		{fabricInfo{}, "host:h1"},
		{fabricInfo{state: nvml.GPU_FABRIC_STATE_COMPLETED, clusterUUID: uuid, cliqueID: 7},
			"fabric:12345678-9abc-def0-0102-030405060708:7"},
		{fabricInfo{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS, clusterUUID: uuid}, "host:h1"},
		{fabricInfo{state: nvml.GPU_FABRIC_STATE_COMPLETED, status: uint32(nvml.ERROR_UNKNOWN), clusterUUID: uuid}, "host:h1"},
		{fabricInfo{state: nvml.GPU_FABRIC_STATE_COMPLETED}, "host:h1"},
	}
	for _, c := range cases {
		if got := domainKey(c.f, "h1"); got != c.want {
			t.Errorf("domainKey(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// TestDomainKeyFailsGracefully runs everywhere: without NVML it must return
// an error, not panic; with a GPU it must return a key.
func TestDomainKeyFailsGracefully(t *testing.T) {
	key, err := DomainKey(0)
	if err != nil {
		if cuda.Load() == nil {
			t.Fatalf("CUDA works but DomainKey(0): %v", err)
		}
		t.Logf("no GPU: %v", err)
		return
	}
	t.Logf("DomainKey(0) = %q", key)
}

// TestGPUDomainKey needs a GPU: there DomainKey must name a domain.
func TestGPUDomainKey(t *testing.T) {
	gputest.Context(t)
	key, err := DomainKey(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DomainKey(0) = %q", key)
}
