package cuda

// #include "shim.h"
import "C"

import "fmt"

// Device is a CUDA device ordinal, as the driver numbers them (after
// CUDA_VISIBLE_DEVICES).
type Device int

// The CUdevice_attribute values this package reads (cuda.h).
const (
	attrMultiprocessorCount    = 16
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
)

// DeviceCount returns the number of devices the driver sees.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.m2n_cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal, checking that it
// exists.
func GetDevice(ordinal int) (Device, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var d C.CUdevice
	if err := check("cuDeviceGet", C.m2n_cuDeviceGet(&d, C.int(ordinal))); err != nil {
		return 0, err
	}
	return Device(d), nil
}

// Name returns the device's marketing name ("NVIDIA H200").
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.m2n_cuDeviceGetName(&buf[0], C.int(len(buf)), C.CUdevice(d))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// attribute returns one device attribute (cuDeviceGetAttribute).
func (d Device) attribute(a int) (int, error) {
	var v C.int
	if err := check("cuDeviceGetAttribute", C.m2n_cuDeviceGetAttribute(&v, C.int(a), C.CUdevice(d))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// multiprocessorCount returns the number of SMs (132 on an H200).
func (d Device) multiprocessorCount() (int, error) {
	return d.attribute(attrMultiprocessorCount)
}

// computeCapability returns the device's compute capability (9, 0 on Hopper).
func (d Device) computeCapability() (major, minor int, err error) {
	if major, err = d.attribute(attrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.attribute(attrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// PCIBusID returns the device's PCI address, "0000:18:00.0", in the form NVML
// accepts.
func (d Device) PCIBusID() (string, error) {
	var buf [64]C.char
	if err := check("cuDeviceGetPCIBusId", C.m2n_cuDeviceGetPCIBusId(&buf[0], C.int(len(buf)), C.CUdevice(d))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// totalMem returns the device's memory in bytes.
func (d Device) totalMem() (int64, error) {
	var n C.size_t
	if err := check("cuDeviceTotalMem", C.m2n_cuDeviceTotalMem(&n, C.CUdevice(d))); err != nil {
		return 0, err
	}
	return int64(n), nil
}

// String names the device by ordinal.
func (d Device) String() string { return fmt.Sprintf("cuda:%d", int(d)) }
