//go:build nonvml

package nvlink

import "errors"

// DomainKey, in a build with the nonvml tag, always fails, so that callers
// fall back to the host as the domain. The tag leaves go-nvml out: its cgo
// code leaves every NVML symbol undefined until libnvidia-ml is opened,
// which an executable tolerates (lazy binding) but a shared library that
// is dlopened with RTLD_NOW (ctypes) or linked into a program (-lm2n) does
// not. The C library (capi) is built with it; multi-node NVLink fabrics are
// then not told from their hosts.
func DomainKey(device int) (string, error) {
	return "", errors.New("nvlink: built without NVML (the nonvml tag): domains are hosts")
}
