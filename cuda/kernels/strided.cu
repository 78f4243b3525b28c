// strided.cu: the pack/unpack kernels, compiled at run time by NVRTC.
//
// One kernel per element width (16, 8, 4, 2, 1 bytes): the host picks the
// widest one that divides every address, run and stride of the copy. A thread
// block is split into teams of 2^team_shift threads; a team copies one work
// item (a chunk of one row) with its lanes striding over the chunk, and teams
// stride over the items (a grid-stride loop). Row addresses come from the row
// index by mixed radix over each side's counts and strides.
//
// The file is plain C apart from the M2N_* macros, so that the tests can
// compile it for the CPU (Emulate in emu.go) and run it one thread at a time.
// The batched kernel (batch.h), which runs the bodies of many copies in one
// launch, and the FP8 kernels (quant.h) are included at the end, into the
// same module.
#include "params.h"

#ifdef __CUDACC__
#define M2N_KERNEL extern "C" __global__ void __launch_bounds__(256)
#define M2N_INLINE __device__ __forceinline__
#define M2N_ALIGNED(n) struct alignas(n)
// __grid_constant__ (sm_70+, CUDA 11.7+) lets the kernel take the address of
// its parameter block without a per-thread copy to local memory.
#define M2N_PARAMS const __grid_constant__ m2n_copy_params
#define M2N_BPARAMS const __grid_constant__ m2n_batch_params
#endif

typedef M2N_ALIGNED(16) m2n_v16 { unsigned int x, y, z, w; } m2n_v16;

#define M2N_UNROLL 4

// M2N_BATCH rows per lane for short rows (see strided_body.h); the host may
// compile with -DM2N_BATCH=n to change it (M2N_PACK_BATCH). 2 measured best
// on an H200: see packBatch in ../kernels.go.
#ifndef M2N_BATCH
#define M2N_BATCH 2
#endif

#ifdef __CUDACC__
#define M2N_UNROLL_PRAGMA _Pragma("unroll")
#else
#define M2N_UNROLL_PRAGMA
#endif

// M2N_TEAMS declares a kernel's teams: the block splits into teams of
// 2^(team_shift) threads; lane is this thread's place in its team, item
// its team's first work item as block `block` of a grid of `grid` blocks
// (both unsigned long long), and step the stride over the items.
#define M2N_TEAMS(team_shift, block, grid) \
	const unsigned int shift = (unsigned int)(team_shift); \
	const unsigned int team = 1u << shift; \
	const unsigned int lane = threadIdx.x & (team - 1); \
	const unsigned long long teams = (unsigned long long)(blockDim.x >> shift); \
	const unsigned long long step = (grid) * teams; \
	unsigned long long item = (block) * teams + (threadIdx.x >> shift)

// m2n_udiv is a / b, in a 32-bit division where both fit (a 64-bit one
// costs several times as many instructions on the GPU).
M2N_INLINE unsigned long long m2n_udiv(unsigned long long a, unsigned long long b) {
	return ((a | b) >> 32) == 0 ? (unsigned long long)((unsigned int)a / (unsigned int)b) : a / b;
}

M2N_INLINE unsigned long long m2n_row_offset(const m2n_side *s, unsigned long long row) {
	// Unrolled with constant indices so that the arrays stay in the
	// parameter bank; nd is the same for every thread, so the branches are
	// uniform.
	const int nd = (int)s->nd;
	unsigned long long off = 0;
#pragma unroll
	for (int i = M2N_MAX_DIMS - 1; i > 0; --i) {
		if (i < nd) {
			const unsigned long long c = s->count[i];
			const unsigned long long q = m2n_udiv(row, c);
			off += (row - q * c) * s->stride[i];
			row = q;
		}
	}
	if (nd > 0) {
		off += row * s->stride[0];
	}
	return off;
}

#define M2N_NAME m2n_copy16
#define M2N_BODY m2n_body16
#define M2N_T m2n_v16
#include "strided_body.h"

#define M2N_NAME m2n_copy8
#define M2N_BODY m2n_body8
#define M2N_T unsigned long long
#include "strided_body.h"

#define M2N_NAME m2n_copy4
#define M2N_BODY m2n_body4
#define M2N_T unsigned int
#include "strided_body.h"

#define M2N_NAME m2n_copy2
#define M2N_BODY m2n_body2
#define M2N_T unsigned short
#include "strided_body.h"

#define M2N_NAME m2n_copy1
#define M2N_BODY m2n_body1
#define M2N_T unsigned char
#include "strided_body.h"

#include "batch.h"

#include "quant.h"
