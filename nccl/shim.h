// shim.h declares the C layer between Go and libnccl.so.2, which
// internal/dl opens with dlopen at run time; nccl.h is not needed to build. The types restate
// nccl.h (NCCL 2.18 to 2.28).
#ifndef M2N_NCCL_SHIM_H
#define M2N_NCCL_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;

#define M2N_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[M2N_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

enum { M2N_NCCL_SUCCESS = 0, M2N_NCCL_IN_PROGRESS = 7 };
// ncclDataType_t values used here.
enum { M2N_NCCL_UINT8 = 1 };

// m2n_nccl_config is the leading part of ncclConfig_t: NCCL reads `size`
// bytes of it, takes defaults for the rest, and reads fields by `version`,
// so a prefix of the 2.28 layout is a valid config for every NCCL since
// 2.14.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
	int trafficClass;
	const char *commName;
} m2n_nccl_config;

// m2n_nccl_config_new allocates a config with every field undefined (NCCL's
// default) but those given; 0 for an int or NULL for a string keeps the
// default, blocking < 0 too. Strings are copied. NCCL keeps commName, so the
// config must live as long as the communicator: free it after destroying
// it.
m2n_nccl_config *m2n_nccl_config_new(int blocking, int cgaClusterSize, int minCTAs, int maxCTAs,
	const char *netName, int splitShare, const char *commName);
void m2n_nccl_config_free(m2n_nccl_config *c);

// m2n_nccl_table is the entry points' symbol table, an m2n_dl_table
// (internal/dl/dl.h) that Load resolves; Split, Finalize and GetLastError
// are optional.
const void *m2n_nccl_table(void);
// m2n_nccl_has reports whether an optional entry point exists: 0 Split,
// 1 Finalize, 2 GetLastError.
int m2n_nccl_has(int which);

// A slot is C memory for a communicator handle that NCCL writes later: a
// non-blocking ncclCommSplit stores the new handle when the split completes.
ncclComm_t *m2n_nccl_slot_new(void);
ncclComm_t m2n_nccl_slot_load(ncclComm_t *slot);
void m2n_nccl_slot_free(ncclComm_t *slot);

const char *m2n_ncclGetErrorString(ncclResult_t r);
const char *m2n_ncclGetLastError(ncclComm_t comm);
ncclResult_t m2n_ncclGetVersion(int *v);
ncclResult_t m2n_ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t m2n_ncclCommInitRankConfig(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank,
	m2n_nccl_config *config);
ncclResult_t m2n_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, m2n_nccl_config *config);
ncclResult_t m2n_ncclCommFinalize(ncclComm_t comm);
ncclResult_t m2n_ncclCommDestroy(ncclComm_t comm);
ncclResult_t m2n_ncclCommAbort(ncclComm_t comm);
ncclResult_t m2n_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
ncclResult_t m2n_ncclCommCount(ncclComm_t comm, int *n);
ncclResult_t m2n_ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t m2n_ncclGroupStart(void);
ncclResult_t m2n_ncclGroupEnd(void);
// Buffers and streams travel as integers: device addresses and CUstreams.
ncclResult_t m2n_ncclSend(uintptr_t buf, size_t count, int type, int peer, ncclComm_t comm, uintptr_t stream);
ncclResult_t m2n_ncclRecv(uintptr_t buf, size_t count, int type, int peer, ncclComm_t comm, uintptr_t stream);

// m2n_nccl_p2p is one send or receive of n bytes at buf with peer.
typedef struct {
	uintptr_t buf;
	size_t n;
	int peer;
	int send;
} m2n_nccl_p2p;

// m2n_nccl_group posts ops[0..n) on comm and stream as one group
// (ncclGroupStart, a ncclSend or ncclRecv each, ncclGroupEnd) in one call.
// It returns the first failure, with *failed the index of the op that
// failed, or -1 when the group itself did (ncclGroupEnd may return
// ncclInProgress on a non-blocking communicator: the group is then queued in
// the background). A failed op still closes the group.
ncclResult_t m2n_nccl_group(ncclComm_t comm, uintptr_t stream, const m2n_nccl_p2p *ops, int n, int *failed);

#endif
