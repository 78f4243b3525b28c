// shim.c forwards calls to NVRTC, which internal/dl opens with dlopen.
// NVRTC's entry points are not versioned: the plain names are the exported
// symbols.
#include "../../internal/dl/dl.h"
#include "shim.h"

static struct {
	const char *(*nvrtcGetErrorString)(nvrtcResult);
	nvrtcResult (*nvrtcVersion)(int *, int *);
	nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
		const char *const *);
	nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *);
	nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
	nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
	nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char *);
	nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
	nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char *);
	nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t *);
	nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char *);
} fn;

#define E(f) { (void **)&fn.f, { #f, NULL }, 0 }

static m2n_dl_sym entries[] = {
	E(nvrtcGetErrorString),
	E(nvrtcVersion),
	E(nvrtcCreateProgram),
	E(nvrtcDestroyProgram),
	E(nvrtcCompileProgram),
	E(nvrtcGetProgramLogSize),
	E(nvrtcGetProgramLog),
	E(nvrtcGetCUBINSize),
	E(nvrtcGetCUBIN),
	E(nvrtcGetPTXSize),
	E(nvrtcGetPTX),
};

#undef E

static const m2n_dl_table table = M2N_DL_TABLE(entries);

const void *m2n_nvrtc_table(void) { return &table; }

const char *m2n_nvrtcGetErrorString(nvrtcResult r) { return fn.nvrtcGetErrorString(r); }
nvrtcResult m2n_nvrtcVersion(int *major, int *minor) { return fn.nvrtcVersion(major, minor); }
nvrtcResult m2n_nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
	const char *const *headers, const char *const *includeNames) {
	return fn.nvrtcCreateProgram(prog, src, name, numHeaders, headers, includeNames);
}
nvrtcResult m2n_nvrtcDestroyProgram(nvrtcProgram *prog) { return fn.nvrtcDestroyProgram(prog); }
nvrtcResult m2n_nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options) {
	return fn.nvrtcCompileProgram(prog, numOptions, options);
}
nvrtcResult m2n_nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n) { return fn.nvrtcGetProgramLogSize(prog, n); }
nvrtcResult m2n_nvrtcGetProgramLog(nvrtcProgram prog, char *log) { return fn.nvrtcGetProgramLog(prog, log); }
nvrtcResult m2n_nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n) { return fn.nvrtcGetCUBINSize(prog, n); }
nvrtcResult m2n_nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) { return fn.nvrtcGetCUBIN(prog, cubin); }
nvrtcResult m2n_nvrtcGetPTXSize(nvrtcProgram prog, size_t *n) { return fn.nvrtcGetPTXSize(prog, n); }
nvrtcResult m2n_nvrtcGetPTX(nvrtcProgram prog, char *ptx) { return fn.nvrtcGetPTX(prog, ptx); }
