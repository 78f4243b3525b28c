// shim.h declares the C layer between Go and NVRTC (libnvrtc.so), which is
// opened with dlopen at run time; nvrtc.h is not needed to build.
#ifndef M2N_NVRTC_SHIM_H
#define M2N_NVRTC_SHIM_H

#include <stddef.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

// m2n_nvrtc_open opens the library at path and resolves its entry points;
// 0 on success, else 1 (dlopen failed) or 2 (a symbol is missing) with a
// message in err. On success where is set to the file the loader used.
int m2n_nvrtc_open(const char *path, char *err, size_t errlen, char *where, size_t wherelen);
// m2n_nvrtc_preload opens a library with RTLD_GLOBAL and keeps it open; 0 on
// success.
int m2n_nvrtc_preload(const char *path);

const char *m2n_nvrtcGetErrorString(nvrtcResult r);
nvrtcResult m2n_nvrtcVersion(int *major, int *minor);
nvrtcResult m2n_nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
	const char *const *headers, const char *const *includeNames);
nvrtcResult m2n_nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult m2n_nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult m2n_nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n);
nvrtcResult m2n_nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult m2n_nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n);
nvrtcResult m2n_nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult m2n_nvrtcGetPTXSize(nvrtcProgram prog, size_t *n);
nvrtcResult m2n_nvrtcGetPTX(nvrtcProgram prog, char *ptx);

#endif
