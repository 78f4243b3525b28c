// shim.c forwards calls to libcuda.so.1, which internal/dl opens with
// dlopen. Entry points are resolved with cuGetProcAddress_v2 (CUDA >= 12.0) at
// a fixed API version, so each name maps to the ABI this file was written
// against even where later toolkits renamed or versioned it; where
// cuGetProcAddress_v2 is absent or refuses a name, internal/dl looks up the
// exact exported (versioned) symbols the table lists instead.
#include "../internal/dl/dl.h"
#include "shim.h"

// CUDA 12.0: the ABI version every entry point below is requested at, unless
// its table row says otherwise.
#define M2N_CUDA_ABI 12000
// CU_GET_PROC_ADDRESS_LEGACY_STREAM: the null stream means the legacy stream.
#define M2N_PROC_LEGACY_STREAM 1

typedef CUresult (*getproc_fn)(const char *, void **, int, unsigned long long, int *);

static struct {
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDeviceGetPCIBusId)(char *, int, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpy2DAsync)(const m2n_memcpy2d *, CUstream);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamQuery)(CUstream);
	CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, CUstream, void **, void **);
	// optional: graphs (CUDA 11.4 and later)
	CUresult (*cuEventRecordWithFlags)(CUevent, CUstream, unsigned int);
	CUresult (*cuStreamBeginCapture)(CUstream, int);
	CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
	CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
	CUresult (*cuGraphExecDestroy)(CUgraphExec);
	CUresult (*cuGraphDestroy)(CUgraph);
	// optional: stream memory operations
	CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, unsigned int, unsigned int);
} fn;

// One row per entry point: the exported symbols internal/dl tries with
// dlsym (in order), then the name cuGetProcAddress knows and the API version
// to ask it for.
struct entry {
	m2n_dl_sym sym;
	const char *name;
	int version;
};

#define E(f, v, s1, s2) { { (void **)&fn.f, { s1, s2 }, 0 }, #f, v }
#define OPT(f, v, s1, s2) { { (void **)&fn.f, { s1, s2 }, 1 }, #f, v }

static struct entry entries[] = {
	E(cuInit, M2N_CUDA_ABI, "cuInit", NULL),
	E(cuGetErrorName, M2N_CUDA_ABI, "cuGetErrorName", NULL),
	E(cuGetErrorString, M2N_CUDA_ABI, "cuGetErrorString", NULL),
	E(cuDriverGetVersion, M2N_CUDA_ABI, "cuDriverGetVersion", NULL),
	E(cuDeviceGetCount, M2N_CUDA_ABI, "cuDeviceGetCount", NULL),
	E(cuDeviceGet, M2N_CUDA_ABI, "cuDeviceGet", NULL),
	E(cuDeviceGetName, M2N_CUDA_ABI, "cuDeviceGetName", NULL),
	E(cuDeviceGetAttribute, M2N_CUDA_ABI, "cuDeviceGetAttribute", NULL),
	E(cuDeviceGetPCIBusId, M2N_CUDA_ABI, "cuDeviceGetPCIBusId", NULL),
	E(cuDeviceTotalMem, M2N_CUDA_ABI, "cuDeviceTotalMem_v2", NULL),
	E(cuDevicePrimaryCtxRetain, M2N_CUDA_ABI, "cuDevicePrimaryCtxRetain", NULL),
	E(cuDevicePrimaryCtxRelease, M2N_CUDA_ABI, "cuDevicePrimaryCtxRelease_v2", NULL),
	E(cuCtxSetCurrent, M2N_CUDA_ABI, "cuCtxSetCurrent", NULL),
	E(cuCtxSynchronize, M2N_CUDA_ABI, "cuCtxSynchronize", NULL),
	E(cuMemGetInfo, M2N_CUDA_ABI, "cuMemGetInfo_v2", NULL),
	E(cuMemAlloc, M2N_CUDA_ABI, "cuMemAlloc_v2", NULL),
	E(cuMemFree, M2N_CUDA_ABI, "cuMemFree_v2", NULL),
	E(cuMemsetD8, M2N_CUDA_ABI, "cuMemsetD8_v2", NULL),
	E(cuMemsetD8Async, M2N_CUDA_ABI, "cuMemsetD8Async", NULL),
	E(cuMemcpyHtoD, M2N_CUDA_ABI, "cuMemcpyHtoD_v2", NULL),
	E(cuMemcpyDtoH, M2N_CUDA_ABI, "cuMemcpyDtoH_v2", NULL),
	E(cuMemcpyDtoDAsync, M2N_CUDA_ABI, "cuMemcpyDtoDAsync_v2", NULL),
	E(cuMemcpy2DAsync, M2N_CUDA_ABI, "cuMemcpy2DAsync_v2", NULL),
	E(cuStreamCreate, M2N_CUDA_ABI, "cuStreamCreate", NULL),
	E(cuStreamDestroy, M2N_CUDA_ABI, "cuStreamDestroy_v2", NULL),
	E(cuStreamSynchronize, M2N_CUDA_ABI, "cuStreamSynchronize", NULL),
	E(cuStreamQuery, M2N_CUDA_ABI, "cuStreamQuery", NULL),
	E(cuStreamWaitEvent, M2N_CUDA_ABI, "cuStreamWaitEvent", NULL),
	E(cuEventCreate, M2N_CUDA_ABI, "cuEventCreate", NULL),
	E(cuEventDestroy, M2N_CUDA_ABI, "cuEventDestroy_v2", NULL),
	E(cuEventRecord, M2N_CUDA_ABI, "cuEventRecord", NULL),
	E(cuEventSynchronize, M2N_CUDA_ABI, "cuEventSynchronize", NULL),
	E(cuEventQuery, M2N_CUDA_ABI, "cuEventQuery", NULL),
	// CUDA 12.8 added cuEventElapsedTime_v2 (same signature) and CUDA 13's
	// header maps the plain name to it; older drivers have only the first.
	E(cuEventElapsedTime, 12080, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
	E(cuModuleLoadData, M2N_CUDA_ABI, "cuModuleLoadData", NULL),
	E(cuModuleUnload, M2N_CUDA_ABI, "cuModuleUnload", NULL),
	E(cuModuleGetFunction, M2N_CUDA_ABI, "cuModuleGetFunction", NULL),
	E(cuOccupancyMaxActiveBlocksPerMultiprocessor, M2N_CUDA_ABI, "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL),
	E(cuLaunchKernel, M2N_CUDA_ABI, "cuLaunchKernel", NULL),
	OPT(cuEventRecordWithFlags, M2N_CUDA_ABI, "cuEventRecordWithFlags", NULL),
	// cuStreamBeginCapture at 10.1 and later is the _v2 entry point, with a
	// capture mode.
	OPT(cuStreamBeginCapture, M2N_CUDA_ABI, "cuStreamBeginCapture_v2", NULL),
	OPT(cuStreamEndCapture, M2N_CUDA_ABI, "cuStreamEndCapture", NULL),
	OPT(cuGraphInstantiateWithFlags, M2N_CUDA_ABI, "cuGraphInstantiateWithFlags", NULL),
	OPT(cuGraphLaunch, M2N_CUDA_ABI, "cuGraphLaunch", NULL),
	OPT(cuGraphExecDestroy, M2N_CUDA_ABI, "cuGraphExecDestroy", NULL),
	OPT(cuGraphDestroy, M2N_CUDA_ABI, "cuGraphDestroy", NULL),
	OPT(cuStreamWaitValue32, M2N_CUDA_ABI, "cuStreamWaitValue32_v2", "cuStreamWaitValue32"),
};

#undef E
#undef OPT

static const m2n_dl_table table = M2N_DL_TABLE(entries);

const void *m2n_cu_table(void) { return &table; }

static getproc_fn getproc;
static m2n_dl_sym getproc_syms[] = {
	{ (void **)&getproc, { "cuGetProcAddress_v2", NULL }, 1 },
};
static const m2n_dl_table getproc_table = M2N_DL_TABLE(getproc_syms);

const void *m2n_cu_getproc_table(void) { return &getproc_table; }

void m2n_cu_getproc(void) {
	if (getproc == NULL) {
		return;
	}
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		struct entry *e = &entries[i];
		void *p = NULL;
		int status = 0;
		if (getproc(e->name, &p, e->version, M2N_PROC_LEGACY_STREAM, &status) != 0 || status != 0) {
			p = NULL;
			if (e->version != M2N_CUDA_ABI &&
			    (getproc(e->name, &p, M2N_CUDA_ABI, M2N_PROC_LEGACY_STREAM, &status) != 0 || status != 0)) {
				p = NULL;
			}
		}
		*e->sym.slot = p;
	}
}

static CUresult cur(CUcontext ctx) {
	return ctx == NULL ? 0 : fn.cuCtxSetCurrent(ctx);
}

#define WITH_CTX(call)                  \
	do {                            \
		CUresult r_ = cur(ctx); \
		if (r_ != 0) {          \
			return r_;      \
		}                       \
		return call;            \
	} while (0)

CUresult m2n_cuInit(void) { return fn.cuInit(0); }

const char *m2n_cuErrorName(CUresult r) {
	const char *s = NULL;
	if (fn.cuGetErrorName == NULL || fn.cuGetErrorName(r, &s) != 0) {
		return NULL;
	}
	return s;
}

const char *m2n_cuErrorString(CUresult r) {
	const char *s = NULL;
	if (fn.cuGetErrorString == NULL || fn.cuGetErrorString(r, &s) != 0) {
		return NULL;
	}
	return s;
}

CUresult m2n_cuDriverGetVersion(int *v) { return fn.cuDriverGetVersion(v); }
CUresult m2n_cuDeviceGetCount(int *n) { return fn.cuDeviceGetCount(n); }
CUresult m2n_cuDeviceGet(CUdevice *d, int ordinal) { return fn.cuDeviceGet(d, ordinal); }
CUresult m2n_cuDeviceGetName(char *name, int len, CUdevice d) { return fn.cuDeviceGetName(name, len, d); }
CUresult m2n_cuDeviceGetAttribute(int *v, int attr, CUdevice d) { return fn.cuDeviceGetAttribute(v, attr, d); }
CUresult m2n_cuDeviceGetPCIBusId(char *id, int len, CUdevice d) { return fn.cuDeviceGetPCIBusId(id, len, d); }
CUresult m2n_cuDeviceTotalMem(size_t *bytes, CUdevice d) { return fn.cuDeviceTotalMem(bytes, d); }
CUresult m2n_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) { return fn.cuDevicePrimaryCtxRetain(ctx, d); }
CUresult m2n_cuDevicePrimaryCtxRelease(CUdevice d) { return fn.cuDevicePrimaryCtxRelease(d); }
CUresult m2n_cuCtxSetCurrent(CUcontext ctx) { return fn.cuCtxSetCurrent(ctx); }
CUresult m2n_cuCtxSynchronize(CUcontext ctx) { WITH_CTX(fn.cuCtxSynchronize()); }
CUresult m2n_cuMemGetInfo(CUcontext ctx, size_t *free_, size_t *total) { WITH_CTX(fn.cuMemGetInfo(free_, total)); }
CUresult m2n_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n) { WITH_CTX(fn.cuMemAlloc(p, n)); }
CUresult m2n_cuMemFree(CUcontext ctx, CUdeviceptr p) { WITH_CTX(fn.cuMemFree(p)); }
CUresult m2n_cuMemsetD8(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n) { WITH_CTX(fn.cuMemsetD8(p, v, n)); }
CUresult m2n_cuMemsetD8Async(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
	WITH_CTX(fn.cuMemsetD8Async(p, v, n, s));
}
CUresult m2n_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n) {
	WITH_CTX(fn.cuMemcpyHtoD(dst, src, n));
}
CUresult m2n_cuMemcpyDtoH(CUcontext ctx, void *dst, CUdeviceptr src, size_t n) {
	WITH_CTX(fn.cuMemcpyDtoH(dst, src, n));
}
CUresult m2n_cuMemcpyDtoDAsync(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	WITH_CTX(fn.cuMemcpyDtoDAsync(dst, src, n, s));
}
CUresult m2n_cuMemcpy2DAsync(CUcontext ctx, const m2n_memcpy2d *p, CUstream s) { WITH_CTX(fn.cuMemcpy2DAsync(p, s)); }
CUresult m2n_cuStreamCreate(CUcontext ctx, CUstream *s, unsigned int flags) { WITH_CTX(fn.cuStreamCreate(s, flags)); }
CUresult m2n_cuStreamDestroy(CUcontext ctx, CUstream s) { WITH_CTX(fn.cuStreamDestroy(s)); }
CUresult m2n_cuStreamSynchronize(CUcontext ctx, CUstream s) { WITH_CTX(fn.cuStreamSynchronize(s)); }
CUresult m2n_cuStreamSynchronizeHandle(CUcontext ctx, uintptr_t s) { WITH_CTX(fn.cuStreamSynchronize((CUstream)s)); }
CUresult m2n_cuStreamQuery(CUcontext ctx, CUstream s) { WITH_CTX(fn.cuStreamQuery(s)); }
CUresult m2n_cuStreamWaitEvent(CUcontext ctx, CUstream s, CUevent e) { WITH_CTX(fn.cuStreamWaitEvent(s, e, 0)); }
CUresult m2n_cuEventCreate(CUcontext ctx, CUevent *e, unsigned int flags) { WITH_CTX(fn.cuEventCreate(e, flags)); }
CUresult m2n_cuEventDestroy(CUcontext ctx, CUevent e) { WITH_CTX(fn.cuEventDestroy(e)); }
CUresult m2n_cuEventRecord(CUcontext ctx, CUevent e, CUstream s) { WITH_CTX(fn.cuEventRecord(e, s)); }
CUresult m2n_cuEventSynchronize(CUcontext ctx, CUevent e) { WITH_CTX(fn.cuEventSynchronize(e)); }
CUresult m2n_cuEventQuery(CUcontext ctx, CUevent e) { WITH_CTX(fn.cuEventQuery(e)); }
CUresult m2n_cuEventElapsedTime(CUcontext ctx, float *ms, CUevent start, CUevent end) {
	WITH_CTX(fn.cuEventElapsedTime(ms, start, end));
}
CUresult m2n_cuModuleLoadData(CUcontext ctx, CUmodule *m, const void *image) { WITH_CTX(fn.cuModuleLoadData(m, image)); }
CUresult m2n_cuModuleUnload(CUcontext ctx, CUmodule m) { WITH_CTX(fn.cuModuleUnload(m)); }
CUresult m2n_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *name) {
	WITH_CTX(fn.cuModuleGetFunction(f, m, name));
}
CUresult m2n_cuOccupancyMaxActiveBlocksPerMultiprocessor(CUcontext ctx, int *n, CUfunction f, int block) {
	WITH_CTX(fn.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, 0));
}

int m2n_cu_has_graphs(void) {
	return fn.cuEventRecordWithFlags != NULL && fn.cuStreamBeginCapture != NULL && fn.cuStreamEndCapture != NULL &&
	       fn.cuGraphInstantiateWithFlags != NULL && fn.cuGraphLaunch != NULL && fn.cuGraphExecDestroy != NULL &&
	       fn.cuGraphDestroy != NULL;
}
CUresult m2n_cuEventRecordWithFlags(CUcontext ctx, CUevent e, CUstream s, unsigned int flags) {
	WITH_CTX(fn.cuEventRecordWithFlags(e, s, flags));
}
CUresult m2n_cuStreamBeginCapture(CUcontext ctx, CUstream s, int mode) { WITH_CTX(fn.cuStreamBeginCapture(s, mode)); }
CUresult m2n_cuStreamEndCapture(CUcontext ctx, CUstream s, CUgraph *g) { WITH_CTX(fn.cuStreamEndCapture(s, g)); }
CUresult m2n_cuGraphInstantiate(CUcontext ctx, CUgraphExec *e, CUgraph g) {
	WITH_CTX(fn.cuGraphInstantiateWithFlags(e, g, 0));
}
CUresult m2n_cuGraphLaunch(CUcontext ctx, CUgraphExec e, CUstream s) { WITH_CTX(fn.cuGraphLaunch(e, s)); }
CUresult m2n_cuGraphExecDestroy(CUcontext ctx, CUgraphExec e) { WITH_CTX(fn.cuGraphExecDestroy(e)); }
CUresult m2n_cuGraphDestroy(CUcontext ctx, CUgraph g) { WITH_CTX(fn.cuGraphDestroy(g)); }

int m2n_cu_has_wait_value(void) { return fn.cuStreamWaitValue32 != NULL; }
CUresult m2n_cuStreamWaitValue32(CUcontext ctx, CUstream s, CUdeviceptr p, unsigned int v) {
	// CU_STREAM_WAIT_VALUE_GEQ
	WITH_CTX(fn.cuStreamWaitValue32(s, p, v, 0x0));
}

CUresult m2n_launch_copy(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_copy_params *p) {
	// The kernel takes the struct by value; cuLaunchKernel copies it out of
	// *p before returning, so p may live in Go memory.
	void *args[1] = { (void *)p };
	WITH_CTX(fn.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
}

CUresult m2n_launch_batch(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_batch_params *p) {
	// As m2n_launch_copy: cuLaunchKernel copies the parameter block.
	void *args[1] = { (void *)p };
	WITH_CTX(fn.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
}

CUresult m2n_launch_quant(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_quant_params *p) {
	// As m2n_launch_copy: cuLaunchKernel copies the parameter block.
	void *args[1] = { (void *)p };
	WITH_CTX(fn.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
}

