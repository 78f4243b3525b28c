// emu.c compiles the strided-copy, batched and FP8 kernels (strided.cu,
// batch.h, quant.h)
// for the CPU and runs a launch one simulated thread at a time. The kernels
// share no memory between threads and never synchronise (the amax kernels'
// shuffles and atomics are GPU-only: here every lane folds its own amax in),
// so running the threads in sequence computes what the GPU computes.
#include <math.h>
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
#define M2N_QPARAMS const m2n_quant_params
#define M2N_BPARAMS const m2n_batch_params

#include "strided.cu"

// M2N_EMU_RUN runs kernel k on *p as every thread of grid blocks of block
// threads, one thread after another.
#define M2N_EMU_RUN(k, p, grid, block) \
	do { \
		gridDim.x = (grid); \
		blockDim.x = (block); \
		for (unsigned int b = 0; b < (grid); b++) { \
			blockIdx.x = b; \
			for (unsigned int t = 0; t < (block); t++) { \
				threadIdx.x = t; \
				k(*(p)); \
			} \
		} \
	} while (0)

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
	M2N_EMU_RUN(k, p, grid, block);
	return 0;
}

int m2n_emu_launch_batch(const m2n_batch_params *p, unsigned int grid, unsigned int block) {
	M2N_EMU_RUN(m2n_batch, p, grid, block);
	return 0;
}

typedef void (*m2n_quant_kernel)(const m2n_quant_params);

static const struct {
	const char *name;
	m2n_quant_kernel k;
} quant_kernels[] = {
	{"m2n_quant_bf16_8", m2n_quant_bf16_8}, {"m2n_quant_bf16_4", m2n_quant_bf16_4},
	{"m2n_quant_bf16_2", m2n_quant_bf16_2}, {"m2n_quant_bf16_1", m2n_quant_bf16_1},
	{"m2n_quant_f32_4", m2n_quant_f32_4}, {"m2n_quant_f32_2", m2n_quant_f32_2},
	{"m2n_quant_f32_1", m2n_quant_f32_1},
	{"m2n_amax_bf16_8", m2n_amax_bf16_8}, {"m2n_amax_bf16_4", m2n_amax_bf16_4},
	{"m2n_amax_bf16_2", m2n_amax_bf16_2}, {"m2n_amax_bf16_1", m2n_amax_bf16_1},
	{"m2n_amax_f32_4", m2n_amax_f32_4}, {"m2n_amax_f32_2", m2n_amax_f32_2},
	{"m2n_amax_f32_1", m2n_amax_f32_1},
	{"m2n_fquant_bf16_8", m2n_fquant_bf16_8}, {"m2n_fquant_bf16_4", m2n_fquant_bf16_4},
	{"m2n_fquant_bf16_2", m2n_fquant_bf16_2}, {"m2n_fquant_bf16_1", m2n_fquant_bf16_1},
	{"m2n_fquant_f32_4", m2n_fquant_f32_4}, {"m2n_fquant_f32_2", m2n_fquant_f32_2},
	{"m2n_fquant_f32_1", m2n_fquant_f32_1},
};

int m2n_emu_launch_quant(const char *name, const m2n_quant_params *p, unsigned int grid, unsigned int block) {
	m2n_quant_kernel k = 0;
	for (size_t i = 0; i < sizeof quant_kernels / sizeof quant_kernels[0]; i++) {
		if (strcmp(quant_kernels[i].name, name) == 0) {
			k = quant_kernels[i].k;
		}
	}
	if (!k) {
		return 1;
	}
	M2N_EMU_RUN(k, p, grid, block);
	return 0;
}

// m2n_emu_quot returns the E4M3 byte the kernels make of x/s in mode 0,
// 1 (m2n_q2_bracket) or 2 (m2n_qfma where m2n_qfma_ok(s), else mode 0). Mode 0 has two forms, the quantize-pack kernels'
// m2n_qdiv and the fused kernels' vector form (M2N_QVEC: m2n_qslow, the
// true division where it marks, else the conversion of x*r); where they
// disagree it returns 0x100, which no byte matches.
static unsigned int m2n_emu_quot(float x, float s, float r, int mode) {
	if (mode == 1) {
		return m2n_q2_bracket(x, x, s, r) & 0xFFu;
	}
	if (mode == 2 && m2n_qfma_ok(s)) {
		return m2n_e4m3(m2n_qfma(x, s, r));
	}
	const unsigned int a = m2n_e4m3(m2n_qdiv(x, s, r));
	const float q = M2N_FMUL(x, r);
	const unsigned int b = m2n_qslow(q) ? m2n_e4m3(M2N_FDIV(x, s)) : (m2n_e4m3x2_raw(q, q) & 0xFFu);
	return a == b ? a : 0x100u;
}

long long m2n_emu_qdiv_mismatches(const float *x, const float *s, long long n, int mode) {
	long long bad = 0;
	for (long long i = 0; i < n; i++) {
		const float r = 1.0f / s[i];
		if (m2n_emu_quot(x[i], s[i], r, mode) != m2n_e4m3(x[i] / s[i])) {
			bad++;
		}
	}
	return bad;
}

long long m2n_emu_qdiv_sweep(int k, unsigned int i0, unsigned int i1, unsigned int jstep, int mode, long long *fast, unsigned int *maxulps) {
	long long bad = 0;
	for (unsigned int i = i0; i < i1 && i < 128u; i++) {
		const float x = m2n_as_float(((unsigned int)(127 + k) << 23) | (i << 16));
		for (unsigned int j = 0; j < (1u << 23); j += jstep) {
			const float s = m2n_as_float((127u << 23) | j);
			const float r = 1.0f / s;
			const float q = x * r, t = x / s;
			if (m2n_qdiv_fast(m2n_as_uint(q) & 0x7FFFFFFFu)) {
				const unsigned int a = m2n_as_uint(q), b = m2n_as_uint(t);
				const unsigned int d = a > b ? a - b : b - a;
				(*fast)++;
				if (d > *maxulps) {
					*maxulps = d;
				}
			}
			if (m2n_emu_quot(x, s, r, mode) != m2n_e4m3(t)) {
				bad++;
			}
		}
	}
	return bad;
}

long long m2n_emu_qfma_sweep(int sb, int k, unsigned int i0, unsigned int i1, unsigned int jstep, long long *exact) {
	long long bad = 0;
	const float ps = ldexpf(1.0f, sb);
	for (unsigned int j = 0; j < (1u << 23); j += jstep) {
		const float s = m2n_as_float((127u << 23) | j) * ps;
		const float r = 1.0f / s;
		for (unsigned int i = i0; i <= i1 && i <= 128u; i++) {
			// i == 128: the zeros
			const float m = i == 128u ? 0.0f : ldexpf(1.0f + (float)i / 128.0f, k);
			for (int sign = 0; sign < 2; sign++) {
				const float x = sign ? -m : m;
				const float q = m2n_qfma(x, s, r), t = x / s;
				if (m2n_as_uint(q) == m2n_as_uint(t)) {
					(*exact)++;
				}
				if (m2n_e4m3(q) != m2n_e4m3(t)) {
					bad++;
				}
			}
		}
	}
	return bad;
}
