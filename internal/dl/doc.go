// Package dl opens the C libraries that m2n's GPU bindings call at run time
// (libcuda.so.1 for cuda, libnvrtc for cuda/nvrtc, libnccl.so.2 for nccl),
// so that building needs none of them. It is the one place that calls
// dlopen and dlsym and words their failures.
//
// A binding keeps the library's function pointers in its C shim, because C
// calls them, and lists them in a symbol table of the form dl.h declares:
//
//	// shim.c
//	#include "../internal/dl/dl.h"
//	static struct { ncclResult_t (*ncclGetVersion)(int *); ... } fn;
//	static m2n_dl_sym syms[] = {
//		{ (void **)&fn.ncclGetVersion, { "ncclGetVersion", NULL }, 0 },
//		...
//	};
//	static const m2n_dl_table table = M2N_DL_TABLE(syms);
//	const m2n_dl_table *m2n_nccl_table(void) { return &table; }
//
// and its Go side opens the library once and resolves the table, an
// error wrapping its ErrNotAvailable where the library is not installed:
//
//	spec := dl.Spec{Name: "libnccl.so.2", Env: "M2N_NCCL_PATH", Candidates: []string{"libnccl.so.2"}}
//	lib, err := dl.Load("nccl", spec, ErrNotAvailable, unsafe.Pointer(C.m2n_nccl_table()))
//
// Failures are one *Error type that names the library, the override
// variable, every file tried with the loader's reason, or the file that
// opened and the required symbols it lacks:
//
//	libnccl.so.2 not found: tried libnccl.so.2: cannot open shared object file: No such file or directory (set M2N_NCCL_PATH to the library's file)
//	/opt/nccl/lib/libnccl.so.2 (libnccl.so.2) lacks symbol ncclCommInitRankConfig
//
// Libraries stay open for the life of the process. The package is cgo and
// links -ldl.
package dl
