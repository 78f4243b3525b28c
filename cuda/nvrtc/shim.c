// shim.c opens NVRTC with dlopen and forwards calls to it. NVRTC's entry
// points are not versioned: the plain names are the exported symbols.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

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

#define E(f) { (void **)&fn.f, #f }

static struct {
	void **slot;
	const char *name;
} entries[] = {
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

static void *lib;

int m2n_nvrtc_open(const char *path, char *err, size_t errlen, char *where, size_t wherelen) {
	if (lib != NULL) {
		return 0;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		void *p = dlsym(h, entries[i].name);
		if (p == NULL) {
			snprintf(err, errlen, "%s: no entry point %s", path, entries[i].name);
			dlclose(h);
			memset(&fn, 0, sizeof(fn));
			return 2;
		}
		*entries[i].slot = p;
	}
	Dl_info info;
	where[0] = 0;
	if (dladdr((void *)fn.nvrtcVersion, &info) != 0 && info.dli_fname != NULL) {
		snprintf(where, wherelen, "%s", info.dli_fname);
	}
	lib = h;
	return 0;
}

int m2n_nvrtc_preload(const char *path) {
	return dlopen(path, RTLD_NOW | RTLD_GLOBAL) == NULL ? 1 : 0;
}

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
