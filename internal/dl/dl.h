// dl.h is the C half of package internal/dl: the symbol table that a
// binding's shim (cuda/shim.c, cuda/nvrtc/shim.c, nccl/shim.c) hands to
// dl.Library.Resolve. A shim keeps the library's function pointers in C,
// because C calls them, and describes them with one m2n_dl_sym each; the
// loading itself (dlopen, dlsym, errors) lives in internal/dl alone.
//
// Every shim that includes this file is in a package that imports
// internal/dl, so the go command rebuilds it when this file changes.
#ifndef M2N_DL_H
#define M2N_DL_H

#include <stddef.h>

// m2n_dl_sym is one entry point. Resolve stores in *slot the address of the
// first of names[0] and names[1] (which may be NULL) that the library
// exports, unless *slot is already set (by a binding's own resolver, such as
// CUDA's cuGetProcAddress). If neither name is found, a required symbol
// fails Resolve and an optional one leaves *slot NULL.
typedef struct {
	void **slot;
	const char *names[2];
	int optional;
} m2n_dl_sym;

// m2n_dl_table is a binding's symbol table: n rows of stride bytes each at
// rows, every row starting with an m2n_dl_sym, so that a binding may keep
// fields of its own after it.
typedef struct {
	void *rows;
	size_t n;
	size_t stride;
} m2n_dl_table;

// M2N_DL_TABLE(rows) initializes an m2n_dl_table over the array rows.
#define M2N_DL_TABLE(rows) { (void *)(rows), sizeof(rows) / sizeof((rows)[0]), sizeof((rows)[0]) }

#endif
