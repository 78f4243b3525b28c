//go:build !nonvml

package nvlink

import (
	"errors"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/m2n-dev/m2n/cuda"
)

// DomainKey returns a key naming the fast local fabric that device (a CUDA
// ordinal) sits in, for grouping ranks into domains: equal keys, same
// domain. A GPU that has joined an NVLink fabric (multi-node NVLink,
// nvmlDeviceGetGpuFabricInfoV reports state completed with a cluster UUID)
// gets "fabric:<cluster UUID>:<clique id>"; any other GPU gets
// "host:<hostname>", its NVLink/PCIe domain being the host.
//
// It asks NVML (libnvidia-ml.so.1, opened by go-nvml) and returns an error
// naming the NVML call, never panics, where NVML or the device is missing. The device is found by
// its PCI bus id when CUDA is loaded, so CUDA_VISIBLE_DEVICES is honoured;
// otherwise device is taken as an NVML index.
func DomainKey(device int) (string, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return "", fmt.Errorf("nvlink: nvmlInit: %s", r.Error())
	}
	defer nvml.Shutdown()
	h, err := nvmlDevice(device)
	if err != nil {
		return "", err
	}
	var info fabricInfo
	if nvml.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfoV") == nil {
		v, r := h.GetGpuFabricInfoV().V2()
		if r == nvml.SUCCESS {
			info = fabricInfo{state: v.State, status: v.Status, clusterUUID: v.ClusterUuid, cliqueID: v.CliqueId}
		}
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("nvlink: DomainKey: %w", err)
	}
	return domainKey(info, host), nil
}

func nvmlDevice(device int) (nvml.Device, error) {
	if cuda.Load() == nil {
		d, err := cuda.GetDevice(device)
		if err != nil {
			return nil, err
		}
		bus, err := d.PCIBusID()
		if err != nil {
			return nil, err
		}
		h, r := nvml.DeviceGetHandleByPciBusId(bus)
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("nvlink: nvmlDeviceGetHandleByPciBusId(%s): %s", bus, r.Error())
		}
		return h, nil
	}
	if device < 0 {
		return nil, errors.New("nvlink: DomainKey: negative device")
	}
	h, r := nvml.DeviceGetHandleByIndex(device)
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("nvlink: nvmlDeviceGetHandleByIndex(%d): %s", device, r.Error())
	}
	return h, nil
}

// fabricInfo is what DomainKey reads from nvmlGpuFabricInfo_v2.
type fabricInfo struct {
	state       uint8  // NVML_GPU_FABRIC_STATE_*
	status      uint32 // nvmlReturn_t of the registration
	clusterUUID [16]uint8
	cliqueID    uint32
}

func domainKey(f fabricInfo, host string) string {
	if f.state == nvml.GPU_FABRIC_STATE_COMPLETED && f.status == uint32(nvml.SUCCESS) && f.clusterUUID != [16]uint8{} {
		u := f.clusterUUID
		return fmt.Sprintf("fabric:%x-%x-%x-%x-%x:%d", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16], f.cliqueID)
	}
	return "host:" + host
}
