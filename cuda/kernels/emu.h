#ifndef M2N_EMU_H
#define M2N_EMU_H

#include "params.h"

// m2n_emu_launch runs kernel m2n_copy<width> over grid blocks of block
// threads; 0 on success, 1 for an unknown width.
int m2n_emu_launch(int width, const m2n_copy_params *p, unsigned int grid, unsigned int block);

// m2n_emu_launch_batch runs the batched kernel m2n_batch over grid blocks of
// block threads; 0 on success.
int m2n_emu_launch_batch(const m2n_batch_params *p, unsigned int grid, unsigned int block);

// m2n_emu_launch_quant runs the FP8 kernel of the given name (m2n_quant_*
// or m2n_amax_*, see quant.h) over grid blocks of block threads; 0 on
// success, 1 for an unknown name.
int m2n_emu_launch_quant(const char *name, const m2n_quant_params *p, unsigned int grid, unsigned int block);

// m2n_emu_qdiv_mismatches counts the pairs i for which the kernels'
// rounding of x[i]/s[i] to E4M3 through m2n_qdiv (a multiply by the
// reciprocal, the true division near rounding points; mode 1: through
// m2n_q2_bracket, the bracket test) differs from the rounding of the true
// division.
long long m2n_emu_qdiv_mismatches(const float *x, const float *s, long long n, int mode);

// m2n_emu_qdiv_sweep checks m2n_qdiv against the true division for the
// bfloat16 significands i0 <= i < i1 (x = (1 + i/128) * 2^k) and every jstep-th float32
// significand s in [1, 2), through m2n_qdiv (mode 0) or m2n_q2_bracket
// (mode 1): it returns the pairs that round differently,
// and adds to *fast the pairs that take the multiply and raises *maxulps to
// the largest distance, in float32 steps, between the multiply's quotient
// and the division's among them.
long long m2n_emu_qdiv_sweep(int k, unsigned int i0, unsigned int i1, unsigned int jstep, int mode, long long *fast, unsigned int *maxulps);

// m2n_emu_qfma_sweep checks m2n_qfma against the true division x/s for
// x = +-(1 + i/128) * 2^k, i0 <= i <= i1 (i = 128: the zeros), and every
// jstep-th float32 significand of s in [2^sb, 2^(sb+1)): it returns the
// pairs whose E4M3 bytes differ and adds to *exact the pairs whose float32
// quotients are equal.
long long m2n_emu_qfma_sweep(int sb, int k, unsigned int i0, unsigned int i1, unsigned int jstep, long long *exact);

#endif
