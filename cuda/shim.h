// shim.h declares the small C layer between Go and libcuda.so.1. The driver
// is opened with dlopen at run time, so building needs no CUDA toolkit: the
// few types below restate what cuda.h defines (CUDA 12/13 ABI).
#ifndef M2N_CUDA_SHIM_H
#define M2N_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/params.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUarray_st *CUarray;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

// CUmemorytype values (cuda.h).
enum { M2N_CU_MEMORYTYPE_HOST = 1, M2N_CU_MEMORYTYPE_DEVICE = 2 };

// CUDA_MEMCPY2D (cuda.h, the _v2 layout used since CUDA 3.2). Enums are int.
typedef struct {
	size_t srcXInBytes;
	size_t srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	CUarray srcArray;
	size_t srcPitch;
	size_t dstXInBytes;
	size_t dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	CUarray dstArray;
	size_t dstPitch;
	size_t WidthInBytes;
	size_t Height;
} m2n_memcpy2d;

// Loading (cuda/load.go): internal/dl opens the driver and resolves
// m2n_cu_getproc_table (cuGetProcAddress_v2, if the driver has it); then
// m2n_cu_getproc fills the entry points cuGetProcAddress_v2 knows, and
// internal/dl resolves the rest of m2n_cu_table by their exported names.
// The tables are m2n_dl_table values (internal/dl/dl.h), passed as void *.
const void *m2n_cu_table(void);
const void *m2n_cu_getproc_table(void);
void m2n_cu_getproc(void);

// Every wrapper below that takes a CUcontext first makes it current on the
// calling OS thread (cuCtxSetCurrent), so a Go caller needs no thread lock.
CUresult m2n_cuInit(void);
const char *m2n_cuErrorName(CUresult r);
const char *m2n_cuErrorString(CUresult r);
CUresult m2n_cuDriverGetVersion(int *v);
CUresult m2n_cuDeviceGetCount(int *n);
CUresult m2n_cuDeviceGet(CUdevice *d, int ordinal);
CUresult m2n_cuDeviceGetName(char *name, int len, CUdevice d);
CUresult m2n_cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult m2n_cuDeviceGetPCIBusId(char *id, int len, CUdevice d);
CUresult m2n_cuDeviceTotalMem(size_t *bytes, CUdevice d);
CUresult m2n_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d);
CUresult m2n_cuDevicePrimaryCtxRelease(CUdevice d);
CUresult m2n_cuCtxSetCurrent(CUcontext ctx);
CUresult m2n_cuCtxSynchronize(CUcontext ctx);
CUresult m2n_cuMemGetInfo(CUcontext ctx, size_t *free_, size_t *total);
CUresult m2n_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n);
CUresult m2n_cuMemFree(CUcontext ctx, CUdeviceptr p);
CUresult m2n_cuMemsetD8(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n);
CUresult m2n_cuMemsetD8Async(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n, CUstream s);
CUresult m2n_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n);
CUresult m2n_cuMemcpyDtoH(CUcontext ctx, void *dst, CUdeviceptr src, size_t n);
CUresult m2n_cuMemcpyDtoDAsync(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult m2n_cuMemcpy2DAsync(CUcontext ctx, const m2n_memcpy2d *p, CUstream s);
CUresult m2n_cuStreamCreate(CUcontext ctx, CUstream *s, unsigned int flags);
CUresult m2n_cuStreamDestroy(CUcontext ctx, CUstream s);
CUresult m2n_cuStreamSynchronize(CUcontext ctx, CUstream s);
// m2n_cuStreamSynchronizeHandle synchronizes a stream given as an integer
// (another library's CUstream or cudaStream_t; 0 the legacy default stream).
CUresult m2n_cuStreamSynchronizeHandle(CUcontext ctx, uintptr_t s);
CUresult m2n_cuStreamQuery(CUcontext ctx, CUstream s);
CUresult m2n_cuStreamWaitEvent(CUcontext ctx, CUstream s, CUevent e);
CUresult m2n_cuEventCreate(CUcontext ctx, CUevent *e, unsigned int flags);
CUresult m2n_cuEventDestroy(CUcontext ctx, CUevent e);
CUresult m2n_cuEventRecord(CUcontext ctx, CUevent e, CUstream s);
CUresult m2n_cuEventSynchronize(CUcontext ctx, CUevent e);
CUresult m2n_cuEventQuery(CUcontext ctx, CUevent e);
CUresult m2n_cuEventElapsedTime(CUcontext ctx, float *ms, CUevent start, CUevent end);
// Graphs (optional entry points: m2n_cu_has_graphs says whether the driver
// has them all).
int m2n_cu_has_graphs(void);
CUresult m2n_cuEventRecordWithFlags(CUcontext ctx, CUevent e, CUstream s, unsigned int flags);
CUresult m2n_cuStreamBeginCapture(CUcontext ctx, CUstream s, int mode);
CUresult m2n_cuStreamEndCapture(CUcontext ctx, CUstream s, CUgraph *g);
CUresult m2n_cuGraphInstantiate(CUcontext ctx, CUgraphExec *e, CUgraph g);
CUresult m2n_cuGraphLaunch(CUcontext ctx, CUgraphExec e, CUstream s);
CUresult m2n_cuGraphExecDestroy(CUcontext ctx, CUgraphExec e);
CUresult m2n_cuGraphDestroy(CUcontext ctx, CUgraph g);
// Stream memory operations (optional).
int m2n_cu_has_wait_value(void);
CUresult m2n_cuStreamWaitValue32(CUcontext ctx, CUstream s, CUdeviceptr p, unsigned int v);
CUresult m2n_cuModuleLoadData(CUcontext ctx, CUmodule *m, const void *image);
CUresult m2n_cuModuleUnload(CUcontext ctx, CUmodule m);
CUresult m2n_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *name);
CUresult m2n_cuOccupancyMaxActiveBlocksPerMultiprocessor(CUcontext ctx, int *n, CUfunction f, int block);
CUresult m2n_launch_copy(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_copy_params *p);
CUresult m2n_launch_batch(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_batch_params *p);
CUresult m2n_launch_quant(CUcontext ctx, CUfunction f, unsigned int grid, unsigned int block, CUstream s,
	const m2n_quant_params *p);

#endif
