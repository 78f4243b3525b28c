// Package nvrtc compiles CUDA C++ to GPU code at run time with NVRTC, which
// it opens with dlopen: building needs no CUDA toolkit, running needs
// libnvrtc.so (CUDA 12 or 13) on the loader's path, in /usr/local/cuda, or
// named by M2N_NVRTC_PATH.
//
//	if err := nvrtc.Load(); errors.Is(err, nvrtc.ErrNotAvailable) {
//		// no toolkit here: skip, and say err
//	}
//	cubin, err := nvrtc.Compile(src, "kernels.cu", nil,
//		[]string{"--gpu-architecture=sm_90"}, nvrtc.CUBIN)
//	// cubin goes to cuModuleLoadData (cuda.Context loads its own kernels).
//
// Only package cuda uses it; it is cgo, one package per C library.
package nvrtc
