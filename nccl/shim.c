// shim.c forwards calls to libnccl.so.2, which internal/dl opens with dlopen.
// NCCL's entry points are not versioned; the plain names are the exported
// symbols.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../internal/dl/dl.h"
#include "shim.h"

#define M2N_NCCL_MAGIC 0xcafebeef
// The ncclConfig_t layout m2n_nccl_config is a prefix of: NCCL 2.28.0.
#define M2N_NCCL_CONFIG_VERSION 22800
#define M2N_UNDEF_INT INT_MIN

typedef void *stream_t;

static struct {
	const char *(*ncclGetErrorString)(ncclResult_t);
	const char *(*ncclGetLastError)(ncclComm_t);
	ncclResult_t (*ncclGetVersion)(int *);
	ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *);
	ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, m2n_nccl_config *);
	ncclResult_t (*ncclCommSplit)(ncclComm_t, int, int, ncclComm_t *, m2n_nccl_config *);
	ncclResult_t (*ncclCommFinalize)(ncclComm_t);
	ncclResult_t (*ncclCommDestroy)(ncclComm_t);
	ncclResult_t (*ncclCommAbort)(ncclComm_t);
	ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
	ncclResult_t (*ncclCommCount)(ncclComm_t, int *);
	ncclResult_t (*ncclCommUserRank)(ncclComm_t, int *);
	ncclResult_t (*ncclGroupStart)(void);
	ncclResult_t (*ncclGroupEnd)(void);
	ncclResult_t (*ncclSend)(const void *, size_t, int, int, ncclComm_t, stream_t);
	ncclResult_t (*ncclRecv)(void *, size_t, int, int, ncclComm_t, stream_t);
} fn;

#define E(f, req) { (void **)&fn.f, { #f, NULL }, !(req) }

static m2n_dl_sym entries[] = {
	E(ncclGetErrorString, 1),
	E(ncclGetLastError, 0),
	E(ncclGetVersion, 1),
	E(ncclGetUniqueId, 1),
	E(ncclCommInitRankConfig, 1),
	E(ncclCommSplit, 0),
	E(ncclCommFinalize, 0),
	E(ncclCommDestroy, 1),
	E(ncclCommAbort, 1),
	E(ncclCommGetAsyncError, 1),
	E(ncclCommCount, 1),
	E(ncclCommUserRank, 1),
	E(ncclGroupStart, 1),
	E(ncclGroupEnd, 1),
	E(ncclSend, 1),
	E(ncclRecv, 1),
};

#undef E

static const m2n_dl_table table = M2N_DL_TABLE(entries);

const void *m2n_nccl_table(void) { return &table; }

int m2n_nccl_has(int which) {
	switch (which) {
	case 0: return fn.ncclCommSplit != NULL;
	case 1: return fn.ncclCommFinalize != NULL;
	case 2: return fn.ncclGetLastError != NULL;
	}
	return 0;
}

static char *dup_or_null(const char *s) {
	if (s == NULL || s[0] == 0) {
		return NULL;
	}
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d != NULL) {
		memcpy(d, s, n);
	}
	return d;
}

m2n_nccl_config *m2n_nccl_config_new(int blocking, int cgaClusterSize, int minCTAs, int maxCTAs,
	const char *netName, int splitShare, const char *commName) {
	m2n_nccl_config *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		return NULL;
	}
	c->size = sizeof(*c);
	c->magic = M2N_NCCL_MAGIC;
	c->version = M2N_NCCL_CONFIG_VERSION;
	c->blocking = blocking < 0 ? M2N_UNDEF_INT : blocking;
	c->cgaClusterSize = cgaClusterSize > 0 ? cgaClusterSize : M2N_UNDEF_INT;
	c->minCTAs = minCTAs > 0 ? minCTAs : M2N_UNDEF_INT;
	c->maxCTAs = maxCTAs > 0 ? maxCTAs : M2N_UNDEF_INT;
	c->netName = dup_or_null(netName);
	c->splitShare = splitShare > 0 ? 1 : M2N_UNDEF_INT;
	c->trafficClass = M2N_UNDEF_INT;
	c->commName = dup_or_null(commName);
	return c;
}

void m2n_nccl_config_free(m2n_nccl_config *c) {
	if (c == NULL) {
		return;
	}
	free((void *)c->netName);
	free((void *)c->commName);
	free(c);
}

ncclComm_t *m2n_nccl_slot_new(void) { return calloc(1, sizeof(ncclComm_t)); }
ncclComm_t m2n_nccl_slot_load(ncclComm_t *slot) { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); }
void m2n_nccl_slot_free(ncclComm_t *slot) { free(slot); }

const char *m2n_ncclGetErrorString(ncclResult_t r) { return fn.ncclGetErrorString(r); }
const char *m2n_ncclGetLastError(ncclComm_t comm) {
	return fn.ncclGetLastError == NULL ? NULL : fn.ncclGetLastError(comm);
}
ncclResult_t m2n_ncclGetVersion(int *v) { return fn.ncclGetVersion(v); }
ncclResult_t m2n_ncclGetUniqueId(ncclUniqueId *id) { return fn.ncclGetUniqueId(id); }
ncclResult_t m2n_ncclCommInitRankConfig(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank,
	m2n_nccl_config *config) {
	return fn.ncclCommInitRankConfig(comm, nranks, *id, rank, config);
}
ncclResult_t m2n_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, m2n_nccl_config *config) {
	return fn.ncclCommSplit(comm, color, key, newcomm, config);
}
ncclResult_t m2n_ncclCommFinalize(ncclComm_t comm) { return fn.ncclCommFinalize(comm); }
ncclResult_t m2n_ncclCommDestroy(ncclComm_t comm) { return fn.ncclCommDestroy(comm); }
ncclResult_t m2n_ncclCommAbort(ncclComm_t comm) { return fn.ncclCommAbort(comm); }
ncclResult_t m2n_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
	return fn.ncclCommGetAsyncError(comm, err);
}
ncclResult_t m2n_ncclCommCount(ncclComm_t comm, int *n) { return fn.ncclCommCount(comm, n); }
ncclResult_t m2n_ncclCommUserRank(ncclComm_t comm, int *rank) { return fn.ncclCommUserRank(comm, rank); }
ncclResult_t m2n_ncclGroupStart(void) { return fn.ncclGroupStart(); }
ncclResult_t m2n_ncclGroupEnd(void) { return fn.ncclGroupEnd(); }
ncclResult_t m2n_ncclSend(uintptr_t buf, size_t count, int type, int peer, ncclComm_t comm, uintptr_t stream) {
	return fn.ncclSend((const void *)buf, count, type, peer, comm, (stream_t)stream);
}
ncclResult_t m2n_ncclRecv(uintptr_t buf, size_t count, int type, int peer, ncclComm_t comm, uintptr_t stream) {
	return fn.ncclRecv((void *)buf, count, type, peer, comm, (stream_t)stream);
}

ncclResult_t m2n_nccl_group(ncclComm_t comm, uintptr_t stream, const m2n_nccl_p2p *ops, int n, int *failed) {
	*failed = -1;
	ncclResult_t r = fn.ncclGroupStart();
	if (r != M2N_NCCL_SUCCESS) {
		return r;
	}
	ncclResult_t first = M2N_NCCL_SUCCESS;
	for (int i = 0; i < n && first == M2N_NCCL_SUCCESS; i++) {
		const m2n_nccl_p2p *o = &ops[i];
		r = o->send ? fn.ncclSend((const void *)o->buf, o->n, M2N_NCCL_UINT8, o->peer, comm, (stream_t)stream)
			    : fn.ncclRecv((void *)o->buf, o->n, M2N_NCCL_UINT8, o->peer, comm, (stream_t)stream);
		if (r != M2N_NCCL_SUCCESS && r != M2N_NCCL_IN_PROGRESS) {
			first = r;
			*failed = i;
		}
	}
	r = fn.ncclGroupEnd();
	return first != M2N_NCCL_SUCCESS ? first : r;
}
