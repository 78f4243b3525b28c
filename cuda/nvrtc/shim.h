// shim.h declares the C layer between Go and NVRTC (libnvrtc.so), which
// internal/dl opens with dlopen at run time; nvrtc.h is not needed to build.
#ifndef M2N_NVRTC_SHIM_H
#define M2N_NVRTC_SHIM_H

#include <stddef.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

// m2n_nvrtc_table is the entry points' symbol table, an m2n_dl_table
// (internal/dl/dl.h) that Load resolves.
const void *m2n_nvrtc_table(void);

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
