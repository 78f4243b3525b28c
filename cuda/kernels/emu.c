// emu.c compiles the strided-copy kernels (strided.cu) for the
// CPU and runs a launch one simulated thread at a time. The kernels share no
// memory between threads and never synchronise, so running the threads in
// sequence computes what the GPU computes.
#include <string.h>

#include "emu.h"

typedef struct {
	unsigned int x, y, z;
} m2n_dim3;

static m2n_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define M2N_KERNEL static void
#define M2N_INLINE static inline
#define M2N_ALIGNED(n) struct __attribute__((aligned(n)))
#define M2N_PARAMS const m2n_copy_params

#include "strided.cu"

int m2n_emu_launch(int width, const m2n_copy_params *p, unsigned int grid, unsigned int block) {
	void (*k)(const m2n_copy_params);
	switch (width) {
	case 16: k = m2n_copy16; break;
	case 8: k = m2n_copy8; break;
	case 4: k = m2n_copy4; break;
	case 2: k = m2n_copy2; break;
	case 1: k = m2n_copy1; break;
	default: return 1;
	}
	gridDim.x = grid;
	blockDim.x = block;
	for (unsigned int b = 0; b < grid; b++) {
		blockIdx.x = b;
		for (unsigned int t = 0; t < block; t++) {
			threadIdx.x = t;
			k(*p);
		}
	}
	return 0;
}
