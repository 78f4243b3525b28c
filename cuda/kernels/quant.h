// quant.h: the FP8 kernels, included at the end of strided.cu and compiled
// with it (NVRTC at run time; emu.c for the CPU).
//
// m2n_quant_<src><vec> quantizes a strided box of bf16 or f32 elements
// into contiguous float8_e4m3fn bytes in the same pass as the pack, each
// element divided by its block's scale (looked up per vector of <vec>
// elements, which never straddles a block column): the quantize-while-
// packing that halves the bytes a reshard sends. m2n_amax_<src><vec>
// gathers the partial amax of every block a box touches into a window of
// unsigned ints (float bits: non-negative floats order as their bits; NaN
// and infinities land at 0x7F800000 and above), one atomic max per team
// and work item. m2n_fquant_<src><vec> is both in one pass for boxes that
// hold their blocks whole (no other rank has a part of them, so their
// amax needs no exchange): a thread block per block, read once, amax
// reduced with shuffles and a shared atomic, scale written, elements
// quantized from where they were staged (shared memory from sm_80 on).
// The rule and its reference are in Go, package fp8; the tests compare
// these kernels with it bit for bit.

#ifdef __CUDACC__
// The quantize-pack kernels ask for at least 5 resident blocks of 256
// threads per SM: at most 51 registers, where the compiler would take 58
// and leave 4 blocks. Measured on an H200 against 4, 6 and 8
// (bench/results/h200-quant-bench.txt): 5 is fastest; 8 (at most 32
// registers) is slower. The amax kernels (48 registers) keep the default:
// bound to 5 they ran 8% slower.
#define M2N_QKERNEL extern "C" __global__ void __launch_bounds__(256, 5)
#define M2N_QPARAMS const __grid_constant__ m2n_quant_params
// The fused kernels stage a thread's 8 vectors in shared memory (cp.async,
// quant_body.h's M2N_FSTAGE; 32 KiB a block of 256 threads for 16-byte
// vectors) and ask for 4 resident blocks per SM (at most 64 registers).
// Measured on an H200: with one copy of the quantize loops, 5 blocks ran
// 505-513 us per GiB, 4 518-520, 6 666-674 and 7 or 8 about 900 (spilling;
// bench/results/h200-fp8-stage.txt); since M2N_FSTORE keeps a copy for
// the common division mode (quant_body.h), 4 blocks run block scaling in
// 456-464 us and 2-4 KiB rows in 449 us, against 540-543 and 526 us with 5
// (h200-fp8-kernels.txt). The host may compile with -DM2N_FMINB=n to
// change it (M2N_FUSED_MINB, cuda/kernels.go).
#ifndef M2N_FMINB
#define M2N_FMINB 4
#endif
#define M2N_FKERNEL extern "C" __global__ void __launch_bounds__(256, M2N_FMINB)
M2N_INLINE float m2n_as_float(unsigned int u) { return __uint_as_float(u); }
M2N_INLINE unsigned int m2n_as_uint(float f) { return __float_as_uint(f); }
// Explicitly rounded: the rule is a true float32 division, and the
// subnormal rounding below an addition, never contracted or approximated.
#define M2N_FDIV(a, b) __fdiv_rn((a), (b))
#define M2N_FADD(a, b) __fadd_rn((a), (b))
#define M2N_FMUL(a, b) __fmul_rn((a), (b))
#define M2N_FRCP(a) __frcp_rn(a)
#define M2N_FFMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define M2N_QKERNEL M2N_KERNEL
#define M2N_FKERNEL M2N_KERNEL
M2N_INLINE float m2n_as_float(unsigned int u) {
	union { unsigned int u; float f; } x;
	x.u = u;
	return x.f;
}
M2N_INLINE unsigned int m2n_as_uint(float f) {
	union { unsigned int u; float f; } x;
	x.f = f;
	return x.u;
}
#define M2N_FDIV(a, b) ((a) / (b))
#define M2N_FADD(a, b) ((a) + (b))
#define M2N_FMUL(a, b) ((a) * (b))
#define M2N_FRCP(a) (1.0f / (a))
// fmaf is one rounding of a*b+c, as the GPU's fused multiply-add
#define M2N_FFMA(a, b, c) fmaf((a), (b), (c))
#endif

// m2n_e4m3 rounds q to float8_e4m3fn, nearest with ties to even,
// saturating at +-448 (the rule's clamp); NaN gives 0x7F. It is fp8.Encode.
M2N_INLINE unsigned int m2n_e4m3(float q) {
	const unsigned int u = m2n_as_uint(q);
	const unsigned int a = u & 0x7FFFFFFFu;
	unsigned int c;
	if (a < 0x3C800000u) {
		// below 2^-6: subnormal, multiples of 2^-9; adding 2^14 makes
		// the float adder round there.
		c = m2n_as_uint(M2N_FADD(m2n_as_float(a), 16384.0f)) - 0x46800000u;
	} else if (a < 0x43E00000u) {
		c = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
	} else if (a <= 0x7F800000u) {
		c = 0x7Eu;
	} else {
		return 0x7Fu;
	}
	return c | ((u >> 24) & 0x80u);
}

// m2n_nanfix sets the byte of a NaN among lo and hi in v (lo's low) to
// 0x7F, as m2n_e4m3 gives it.
M2N_INLINE unsigned int m2n_nanfix(unsigned int v, float lo, float hi) {
	if (lo != lo) {
		v = (v & 0xFF00u) | 0x7Fu;
	}
	if (hi != hi) {
		v = (v & 0x00FFu) | 0x7F00u;
	}
	return v;
}

// m2n_e4m3x2 rounds lo and hi as m2n_e4m3 does, lo in the low byte. From
// sm_89 on that is one instruction for both (cvt.rn.satfinite: nearest,
// ties to even, subnormals, saturating at +-448 as the clamp does, infinity
// to 448 as well); a NaN, whose sign the instruction may keep, is set to
// 0x7F as m2n_e4m3 gives it.
M2N_INLINE unsigned int m2n_e4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
	return m2n_nanfix(r, lo, hi);
#else
	return m2n_e4m3(lo) | (m2n_e4m3(hi) << 8);
#endif
}

// m2n_qdiv_fast says whether q' = x*r (a: its magnitude's bits) rounds to
// E4M3 as the true division x/s does without computing it: q' lies in the
// normal E4M3 range with a margin of 256 ulps at both ends, and its bits
// [19:0] (its place between two E4M3 values, whose midpoint is 0x80000)
// are more than 16 ulps from the midpoint.
M2N_INLINE unsigned int m2n_qdiv_fast(unsigned int a) {
	// bitwise, not &&: no branch (0x3C800100 < a < 0x43DFFF00 as one
	// unsigned compare)
	return (a - 0x3C800101u < 0x43DFFF00u - 0x3C800101u) & ((a & 0xFFFFFu) - 0x7FFF0u > 0x20u);
}

// m2n_qdiv returns a float that m2n_e4m3 rounds exactly as it rounds the
// true float32 division x/s (the rule's), at the cost of a multiply for
// almost every element (r = 1/s rounded, once per block).
//
// Why it is exact. Let Q = RN(x/s), the rule's quotient, and q' = RN(x*r).
// r = (1/s)(1+d1) with |d1| <= 2^-24 (2^-22 where 1/s is subnormal, s >
// 2^126: never for a scale the rule makes, which is at most FLT_MAX/448 <
// 2^120), and q' = (x/s)(1+d1)(1+d2) with |d2| <= 2^-24 when q' is normal
// (x is exact, subnormal or not). So |q' - x/s| < 2.6 ulps of q' and |Q -
// x/s| <= 1/2 ulp: Q and q' are at most 4 float32 steps apart (8 across a
// binade edge). Rounding a normal float32 y in [2^-6, 448) to E4M3 changes
// only where y crosses a midpoint between two E4M3 values, the floats whose
// bits [19:0] are 0x80000 (ties to even decide on the midpoint itself);
// the range ends are 256 ulps away. So where m2n_qdiv_fast(q') holds, no
// midpoint and no range end lies between Q and q' or on either, and both
// round to the same E4M3 byte. Elsewhere (near a midpoint, subnormal
// quotients, the clamp, a zero, infinite or NaN scale, a NaN element) the
// true division decides. TestQdivExact (qdiv_test.go) checks the bound
// and the bytes: every bfloat16 significand against every float32 scale
// significand in the interior binade (which stands for every binade
// strictly inside the range: scaling x or s by a power of two scales Q and
// q' alike) and a sample at the four binades that meet the range's ends,
// every bfloat16 value against scales across the range, random float32
// pairs, and quotients a few ulps from every midpoint.
M2N_INLINE float m2n_qdiv(float x, float s, float r) {
	const float q = M2N_FMUL(x, r);
	if (m2n_qdiv_fast(m2n_as_uint(q) & 0x7FFFFFFFu)) {
		return q;
	}
	return M2N_FDIV(x, s);
}

// m2n_qslow is 1 where q = x*r may round to E4M3 otherwise than the true
// division x/s (m2n_qdiv_fast fails on its magnitude) and q is not a zero,
// else 0, without a branch. A zero q is exact: x is a zero, or x*r
// underflowed, or the scale is infinite (r = 0), and then x/s is a zero or
// far below E4M3's smallest half step (2^-10) and rounds to the same
// signed zero (a NaN scale makes q NaN, which is slow).
M2N_INLINE unsigned int m2n_qslow(float q) {
	const unsigned int a = m2n_as_uint(q) & 0x7FFFFFFFu;
	return (m2n_qdiv_fast(a) | (a == 0u)) ^ 1u;
}

// m2n_e4m3x2_raw is m2n_e4m3x2 without the NaN fix-up: a NaN's byte may
// keep its sign (0x7F or 0xFF; the CPU twin keeps it, so that the emulated
// kernels show a missing fix-up). For comparisons, and where no element is
// a NaN.
M2N_INLINE unsigned int m2n_e4m3x2_raw(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
	return r;
#else
	unsigned int a = m2n_e4m3(lo), b = m2n_e4m3(hi);
	if (lo != lo) {
		a |= (m2n_as_uint(lo) >> 24) & 0x80u;
	}
	if (hi != hi) {
		b |= (m2n_as_uint(hi) >> 24) & 0x80u;
	}
	return a | (b << 8);
#endif
}

// m2n_q2_bracket returns the E4M3 bytes of the true float32 divisions
// x0/s and x1/s (x0's in the low byte), as m2n_e4m3x2 rounds them, by
// multiplies: q = x*r, with r = 1/s rounded, is within 4 float32 steps of
// Q = RN(x/s) (the argument at m2n_qdiv), so Q lies between RN(q*(1 -
// 2^-19)) and RN(q*(1 + 2^-19)), which are at least 15 steps from q. The
// rounding to E4M3 (clamp included) is monotonic, so where both ends round
// to q's byte Q does too; elsewhere the true divisions decide. Where x*r is
// a float32 subnormal, |Q| <= 2^-126 and every candidate rounds to a zero
// of Q's sign; infinite, zero and NaN scales and elements give matching
// ends only where the division gives the same byte (or a NaN, 0x7F), and
// else fall back. It trades m2n_qdiv's integer tests for four multiplies
// and two conversions per pair.
M2N_INLINE unsigned int m2n_q2_bracket(float x0, float x1, float s, float r) {
	const float q0 = M2N_FMUL(x0, r), q1 = M2N_FMUL(x1, r);
	const float lo = m2n_as_float(0x3F7FFFE0u), hi = m2n_as_float(0x3F800010u); // 1 -+ 2^-19
	const unsigned int v = m2n_e4m3x2_raw(q0, q1);
	if (m2n_e4m3x2_raw(M2N_FMUL(q0, lo), M2N_FMUL(q1, lo)) == v && m2n_e4m3x2_raw(M2N_FMUL(q0, hi), M2N_FMUL(q1, hi)) == v) {
		return m2n_nanfix(v, q0, q1);
	}
	return m2n_e4m3x2(M2N_FDIV(x0, s), M2N_FDIV(x1, s));
}

// m2n_q1_bracket is m2n_q2_bracket for one element.
M2N_INLINE unsigned int m2n_q1_bracket(float x, float s, float r) {
	const float q = M2N_FMUL(x, r);
	const unsigned int v = m2n_e4m3(q);
	if (m2n_e4m3(M2N_FMUL(q, m2n_as_float(0x3F7FFFE0u))) == v && m2n_e4m3(M2N_FMUL(q, m2n_as_float(0x3F800010u))) == v) {
		return v;
	}
	return m2n_e4m3(M2N_FDIV(x, s));
}

// m2n_qfma returns the true float32 division x/s, RN(x/s), from r = 1/s
// rounded, by one correction of the multiply's quotient: q = RN(x*r), its
// remainder e = q*s - x (exact: one fused multiply-add), and RN(q - e*r).
// That the correction lands on RN(x/s) is not taken from a theorem but
// checked (TestQfmaSweep, qdiv_test.go): every bfloat16 significand of
// either sign, and the zeros, against float32 scale significands in scale
// binades from 2^-90 to 2^119 and quotient binades from 2^9 down to
// float32 subnormals, as E4M3 bytes.
// It holds where m2n_qfma_ok(s), 2^-90 <= s < 2^120: every scale the rule
// makes (amax*float32(1/448) <= FLT_MAX/448 < 2^120) but those of blocks
// whose amax is below about 2^-81. Below that the remainder of a quotient
// that E4M3 still resolves (down to 2^-11) falls under float32's smallest
// normal and is not exact (the sweep finds such pairs with scales near
// 2^-120). The remainder is taken as q*s - x, not x - q*s, so that a zero
// x keeps its sign (-0 - ... gives -0 where x - q*s gives +0). Three
// floating-point operations per element and no test, where m2n_qdiv spends
// a multiply and about eight integer operations.
M2N_INLINE float m2n_qfma(float x, float s, float r) {
	const float q = M2N_FMUL(x, r);
	const float e = M2N_FFMA(q, s, -x);
	return M2N_FFMA(-e, r, q);
}

// m2n_qfma_ok says whether m2n_qfma is exact for scale s: 2^-90 <= s <
// 2^120 (one unsigned compare of its bits; false for zero, negative,
// infinite and NaN scales, so for blocks holding a NaN or infinity, whose
// scale is not finite).
M2N_INLINE unsigned int m2n_qfma_ok(float s) {
	return m2n_as_uint(s) - 0x12800000u < 0x7B800000u - 0x12800000u;
}

// m2n_qfma_lim returns the float bits of the largest magnitude m2n_qfma
// takes with scale s (where m2n_qfma_ok(s)): s*2^100, or FLT_MAX where
// that overflows, so that every quotient is below 2^100 and finite (and
// NaN and infinite elements, whose bits are above FLT_MAX's, never pass).
// The fused kernels need no such bound: their scale is their block's, so
// every quotient is at most 448 and a little.
M2N_INLINE unsigned int m2n_qfma_lim(float s) {
	const unsigned int l = m2n_as_uint(M2N_FMUL(s, m2n_as_float(0x71800000u)));
	return l < 0x7F800000u ? l : 0x7F7FFFFFu;
}

// m2n_pack16x2 joins the low halves of lo and hi (lo's in the low half):
// on the GPU one byte permutation, which ignores the upper halves.
M2N_INLINE unsigned int m2n_pack16x2(unsigned int lo, unsigned int hi) {
#ifdef __CUDACC__
	return __byte_perm(lo, hi, 0x5410);
#else
	return (lo & 0xFFFFu) | (hi << 16);
#endif
}

// m2n_qfma_bf16x2 quantizes the two bf16 elements of word w (the first in
// the low half) by scale s (r its reciprocal) through m2n_qfma: their two
// E4M3 bytes, the first in the low byte, as m2n_e4m3x2_raw gives them. A
// bf16's float is its bits in the upper half, so neither element needs
// more than one instruction to widen.
M2N_INLINE unsigned int m2n_qfma_bf16x2(unsigned int w, float s, float r) {
	return m2n_e4m3x2_raw(m2n_qfma(m2n_as_float(w << 16), s, r), m2n_qfma(m2n_as_float(w & 0xFFFF0000u), s, r));
}

// m2n_tdiv is a / b (b > 0) for the FP8 kernels' per-tile and per-row
// arithmetic: a shift where b is a power of two (1 included: blocks of 128
// rows or columns, row scaling's one-row blocks), else m2n_udiv. b is the
// same for every thread of a launch, so the branch is uniform.
M2N_INLINE unsigned long long m2n_tdiv(unsigned long long a, unsigned long long b) {
	if ((b & (b - 1u)) == 0u) {
#ifdef __CUDACC__
		return a >> (__ffsll((long long)b) - 1);
#else
		return a >> __builtin_ctzll(b);
#endif
	}
	return m2n_udiv(a, b);
}

// m2n_win_row returns the window index of the first block of box row `row`
// (its matrix and block row) less the window's first block column, so
// that adding a block column gives the block's index. The outermost
// dimension needs no division: what is left of row there is below its
// extent.
M2N_INLINE long long m2n_win_row(const m2n_quant_params *p, unsigned long long row) {
	const int nd = (int)p->nd;
	long long base = 0;
#pragma unroll
	for (int i = M2N_MAX_DIMS - 2; i >= 0; --i) {
		if (i < nd - 1) {
			const unsigned long long e = p->ext[i];
			const unsigned long long q = i == 0 ? 0 : m2n_tdiv(row, e);
			unsigned long long idx = p->lo[i] + (row - q * e);
			row = q;
			if (i == nd - 2) {
				idx = m2n_tdiv(idx, p->block_rows);
			}
			base += ((long long)idx - (long long)p->wlo[i]) * (long long)p->wstride[i];
		}
	}
	return base - (long long)p->wlo[nd - 1];
}

// m2n_block_col returns the block column of global column col.
M2N_INLINE unsigned long long m2n_block_col(const m2n_quant_params *p, unsigned long long col) {
	return p->col_shift < 64 ? col >> p->col_shift : col / p->block_cols;
}

// m2n_amax_commit folds a lane's amax m into *w: on the GPU the lanes of a
// team (or of each warp of a larger team) reduce with shuffles and one
// lane does the atomic max; in the emulator every lane folds in its own.
M2N_INLINE void m2n_amax_commit(unsigned int *w, unsigned int m, unsigned int lane, unsigned int team) {
#ifdef __CUDACC__
	const unsigned int width = team < 32u ? team : 32u;
	const unsigned int first = (threadIdx.x & 31u) & ~(width - 1u);
	const unsigned int mask = width == 32u ? 0xFFFFFFFFu : ((1u << width) - 1u) << first;
	for (unsigned int off = width / 2u; off > 0u; off /= 2u) {
		const unsigned int o = __shfl_xor_sync(mask, m, off);
		m = o > m ? o : m;
	}
	if ((lane & (width - 1u)) == 0u) {
		atomicMax(w, m);
	}
#else
	(void)lane;
	(void)team;
	if (*w < m) {
		*w = m;
	}
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// m2n_cp_async copies n (4, 8 or 16) bytes from global src to shared dst
// without a register in between (cp.async; 16 bytes bypass L1); the copies
// a thread started are complete, and visible to it, after
// m2n_cp_async_wait.
M2N_INLINE void m2n_cp_async(void *dst, const void *src, int n) {
	const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
	if (n == 16) {
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
	} else if (n == 8) {
		asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
	} else {
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
	}
}
M2N_INLINE void m2n_cp_async_wait(void) { asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory"); }
#endif

// The fused kernels' geometry (quant_body.h): M2N_FTHREADS threads per
// block at most (the plan launches blockThreads), each keeping M2N_FREGS
// vectors of its block staged (fusedRegs in quant_plan.go).
#define M2N_FTHREADS 256
#define M2N_FREGS 8

// m2n_fused_tile is one work item of a fused kernel: a whole block of the
// box, `rows` box rows from row0 (counted over the box's matrices), vpr
// vectors per row from box column c0, its scale at window index wi.
typedef struct m2n_fused_tile {
	unsigned long long row0, rows, c0, vpr;
	long long wi;
	// lin: the tile's rows are consecutive indices of the source's
	// innermost row dimension, so row r of the tile starts at soff +
	// r*sstride (m2n_fused_lin): lanes step pointers instead of decoding
	// every row's offset.
	unsigned long long lin, soff, sstride;
} m2n_fused_tile;

// m2n_fused_lin sets t's lin, soff and sstride: whether the tile's rows,
// t->rows of them from t->row0, are consecutive indices of the source's
// innermost row dimension (one division per tile), and then the first
// row's offset and the stride between rows.
M2N_INLINE void m2n_fused_lin(const m2n_side *s, m2n_fused_tile *t) {
	const int nd = (int)s->nd;
	t->lin = 0, t->soff = 0, t->sstride = 0;
	if (nd < 1) {
		return;
	}
	const unsigned long long c = s->count[nd - 1];
	if (nd > 1 && (c == 0 || t->row0 - m2n_tdiv(t->row0, c) * c + t->rows > c)) {
		return;
	}
	t->lin = 1;
	t->soff = m2n_row_offset(s, t->row0);
	t->sstride = s->stride[nd - 1];
}

// m2n_fused_tile_of returns work item `item`, (matrix, block row, block
// column) as the amax kernels number theirs: item = (matrix*groups +
// group)*chunks_per_row + piece, a group `group` (block_rows) rows and a
// piece chunk_elems (block_cols) columns, both aligned to the tensor.
M2N_INLINE m2n_fused_tile m2n_fused_tile_of(const m2n_quant_params *p, unsigned long long item, unsigned long long vec) {
	const int nd = (int)p->nd;
	const unsigned long long lo_r = p->lo[nd - 2], ext_r = p->ext[nd - 2];
	const unsigned long long lo_c = p->lo[nd - 1], ext_c = p->ext[nd - 1];
	const unsigned long long g = p->group, pc = p->chunk_elems;
	const unsigned long long t = m2n_tdiv(item, p->chunks_per_row);
	const unsigned long long piece = item - t * p->chunks_per_row;
	// a box of one matrix (every 2-d one) needs no division here
	const unsigned long long mat = t < p->groups ? 0 : m2n_tdiv(t, p->groups);
	const unsigned long long grp = t - mat * p->groups;
	const unsigned long long g0 = (m2n_tdiv(lo_r, g) + grp) * g;
	const unsigned long long r0 = (g0 > lo_r ? g0 : lo_r) - lo_r;
	const unsigned long long r1 = (g0 + g < lo_r + ext_r ? g0 + g : lo_r + ext_r) - lo_r;
	const unsigned long long p0 = (m2n_tdiv(lo_c, pc) + piece) * pc;
	const unsigned long long c0 = (p0 > lo_c ? p0 : lo_c) - lo_c;
	const unsigned long long c1 = (p0 + pc < lo_c + ext_c ? p0 + pc : lo_c + ext_c) - lo_c;
	m2n_fused_tile f;
	f.row0 = mat * ext_r + r0;
	f.rows = r1 - r0;
	f.c0 = c0;
	f.vpr = (c1 - c0) / vec;
	f.wi = m2n_win_row(p, f.row0) + (long long)m2n_block_col(p, lo_c + c0);
	m2n_fused_lin(&p->src, &f);
	return f;
}

// m2n_fused_narrow says whether a tile's row count and a lane's step (in
// bytes, over its rows) both fit in 32 bits, as every tile of a real
// tensor's does: the fused kernels' fast paths count and step in 32 bits.
M2N_INLINE int m2n_fused_narrow(unsigned long long rows, unsigned long long step) { return ((rows | step) >> 32) == 0; }

// m2n_fused_scale is fp8.ScaleOf of an amax given as float bits: 1 for an
// all-zero block, else amax times float32(1/448), one rounded multiply. A
// non-finite amax gives a non-finite scale, which the host refuses.
M2N_INLINE float m2n_fused_scale(unsigned int amax) {
	return amax == 0u ? 1.0f : M2N_FMUL(m2n_as_float(amax), m2n_as_float(0x3B124925u));
}

// m2n_fused_start returns thread tid's first (row, vector column) of a
// tile of vpr vectors per row, and the rows and vectors its nt threads
// advance it by (dc < vpr), in 32-bit divisions where they fit.
M2N_INLINE void m2n_fused_start(unsigned long long vpr, unsigned int tid, unsigned int nt, unsigned long long *r,
                                unsigned long long *cv, unsigned long long *dr, unsigned long long *dc) {
	if ((vpr >> 32) == 0) {
		const unsigned int v = (unsigned int)vpr;
		*r = tid / v;
		*cv = tid - (unsigned int)*r * v;
		*dr = nt / v;
		*dc = nt - (unsigned int)*dr * v;
	} else {
		*r = 0, *cv = tid, *dr = 0, *dc = nt; // nt < vpr
	}
}

// M2N_FSTEP advances a thread's (row, vector column) by its block's
// thread count, dr rows and dc vectors (dc < vpr).
#define M2N_FSTEP(r, cv, dr, dc, vpr) \
	do { \
		(r) += (dr); \
		(cv) += (dc); \
		if ((cv) >= (vpr)) { \
			(cv) -= (vpr); \
			(r)++; \
		} \
	} while (0)

// The fused kernels' amax over a vector as it loads (M2N_FVMAX), in a
// running value M2N_FVMAG turns into the largest magnitude's float bits.
// bf16: magnitudes in pairs, two 16-bit maxima per instruction (their bits
// order as M2N_MAG's, NaN and infinity included); f32: per element.
M2N_INLINE unsigned int m2n_vmax2(unsigned int a, unsigned int b) {
#ifdef __CUDACC__
	return __vmaxu2(a, b);
#else
	const unsigned int lo = (a & 0xFFFFu) > (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
	const unsigned int hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
	return lo | (hi << 16);
#endif
}
M2N_INLINE unsigned int m2n_bf16x2_amax(unsigned int w, unsigned int m) { return m2n_vmax2(w & 0x7FFF7FFFu, m); }
M2N_INLINE unsigned int m2n_bf16x2_mag(unsigned int m) {
	const unsigned int lo = m & 0xFFFFu, hi = m >> 16;
	return (lo > hi ? lo : hi) << 16;
}
M2N_INLINE unsigned int m2n_f32_amax(unsigned int w, unsigned int m) {
	w &= 0x7FFFFFFFu;
	return w > m ? w : m;
}
M2N_INLINE unsigned int m2n_vamax_bf16_8(m2n_v16 v, unsigned int m) {
	return m2n_bf16x2_amax(v.w, m2n_bf16x2_amax(v.z, m2n_bf16x2_amax(v.y, m2n_bf16x2_amax(v.x, m))));
}
M2N_INLINE unsigned int m2n_vamax_bf16_4(unsigned long long v, unsigned int m) {
	return m2n_bf16x2_amax((unsigned int)(v >> 32), m2n_bf16x2_amax((unsigned int)v, m));
}
M2N_INLINE unsigned int m2n_vamax_f32_4(m2n_v16 v, unsigned int m) {
	return m2n_f32_amax(v.w, m2n_f32_amax(v.z, m2n_f32_amax(v.y, m2n_f32_amax(v.x, m))));
}
M2N_INLINE unsigned int m2n_vamax_f32_2(unsigned long long v, unsigned int m) {
	return m2n_f32_amax((unsigned int)(v >> 32), m2n_f32_amax((unsigned int)v, m));
}
M2N_INLINE unsigned int m2n_identity(unsigned int m) { return m; }

// Vectors a lane of the quantize-pack kernels keeps in flight (quantLoads
// in quant_plan.go).
#define M2N_QLOADS 4

// bf16 sources: elements are unsigned shorts, the float is their bits << 16.
#define M2N_ELEM_T unsigned short
#define M2N_ESZ 2
#define M2N_TO_FLOAT(e) m2n_as_float((unsigned int)(e) << 16)
#define M2N_MAG(e) (((unsigned int)(e) & 0x7FFFu) << 16)

#define M2N_QNAME m2n_quant_bf16_8
#define M2N_ANAME m2n_amax_bf16_8
#define M2N_FNAME m2n_fquant_bf16_8
#define M2N_QVEC m2n_qvec_bf16_8
#define M2N_QFVEC m2n_qfvec_bf16_8
#define M2N_FVMAX(v, m) m2n_vamax_bf16_8(v, m)
#define M2N_FVMAG(m) m2n_bf16x2_mag(m)
#define M2N_FLOAD m2n_fload_bf16_8
#define M2N_FSTORE m2n_fstore_bf16_8
#define M2N_FSTORE_MODE m2n_fstore_mode_bf16_8
#define M2N_FQVEC m2n_fqvec_bf16_8
#define M2N_LOAD_T m2n_v16
#define M2N_STORE_T unsigned long long
#define M2N_VEC 8
#include "quant_body.h"

#define M2N_QNAME m2n_quant_bf16_4
#define M2N_ANAME m2n_amax_bf16_4
#define M2N_FNAME m2n_fquant_bf16_4
#define M2N_QVEC m2n_qvec_bf16_4
#define M2N_QFVEC m2n_qfvec_bf16_4
#define M2N_FVMAX(v, m) m2n_vamax_bf16_4(v, m)
#define M2N_FVMAG(m) m2n_bf16x2_mag(m)
#define M2N_FLOAD m2n_fload_bf16_4
#define M2N_FSTORE m2n_fstore_bf16_4
#define M2N_FSTORE_MODE m2n_fstore_mode_bf16_4
#define M2N_FQVEC m2n_fqvec_bf16_4
#define M2N_LOAD_T unsigned long long
#define M2N_STORE_T unsigned int
#define M2N_VEC 4
#include "quant_body.h"

#define M2N_QNAME m2n_quant_bf16_2
#define M2N_ANAME m2n_amax_bf16_2
#define M2N_FNAME m2n_fquant_bf16_2
#define M2N_QVEC m2n_qvec_bf16_2
#define M2N_QFVEC m2n_qfvec_bf16_2
#define M2N_FVMAX(v, m) m2n_bf16x2_amax(v, m)
#define M2N_FVMAG(m) m2n_bf16x2_mag(m)
#define M2N_FLOAD m2n_fload_bf16_2
#define M2N_FSTORE m2n_fstore_bf16_2
#define M2N_FSTORE_MODE m2n_fstore_mode_bf16_2
#define M2N_FQVEC m2n_fqvec_bf16_2
#define M2N_LOAD_T unsigned int
#define M2N_STORE_T unsigned short
#define M2N_VEC 2
#include "quant_body.h"

#define M2N_QNAME m2n_quant_bf16_1
#define M2N_ANAME m2n_amax_bf16_1
#define M2N_FNAME m2n_fquant_bf16_1
#define M2N_QVEC m2n_qvec_bf16_1
#define M2N_QFVEC m2n_qfvec_bf16_1
#define M2N_FVMAX(v, m) m2n_bf16x2_amax((unsigned int)(v), m)
#define M2N_FVMAG(m) m2n_bf16x2_mag(m)
#define M2N_FLOAD m2n_fload_bf16_1
#define M2N_FSTORE m2n_fstore_bf16_1
#define M2N_FSTORE_MODE m2n_fstore_mode_bf16_1
#define M2N_FQVEC m2n_fqvec_bf16_1
#define M2N_LOAD_T unsigned short
#define M2N_STORE_T unsigned char
#define M2N_VEC 1
#include "quant_body.h"

#undef M2N_ELEM_T
#undef M2N_ESZ
#undef M2N_TO_FLOAT
#undef M2N_MAG

// f32 sources.
#define M2N_ELEM_T unsigned int
#define M2N_ESZ 4
#define M2N_TO_FLOAT(e) m2n_as_float(e)
#define M2N_MAG(e) ((e) & 0x7FFFFFFFu)

#define M2N_QNAME m2n_quant_f32_4
#define M2N_ANAME m2n_amax_f32_4
#define M2N_FNAME m2n_fquant_f32_4
#define M2N_QVEC m2n_qvec_f32_4
#define M2N_QFVEC m2n_qfvec_f32_4
#define M2N_FVMAX(v, m) m2n_vamax_f32_4(v, m)
#define M2N_FVMAG(m) m2n_identity(m)
#define M2N_FLOAD m2n_fload_f32_4
#define M2N_FSTORE m2n_fstore_f32_4
#define M2N_FSTORE_MODE m2n_fstore_mode_f32_4
#define M2N_FQVEC m2n_fqvec_f32_4
#define M2N_LOAD_T m2n_v16
#define M2N_STORE_T unsigned int
#define M2N_VEC 4
#include "quant_body.h"

#define M2N_QNAME m2n_quant_f32_2
#define M2N_ANAME m2n_amax_f32_2
#define M2N_FNAME m2n_fquant_f32_2
#define M2N_QVEC m2n_qvec_f32_2
#define M2N_QFVEC m2n_qfvec_f32_2
#define M2N_FVMAX(v, m) m2n_vamax_f32_2(v, m)
#define M2N_FVMAG(m) m2n_identity(m)
#define M2N_FLOAD m2n_fload_f32_2
#define M2N_FSTORE m2n_fstore_f32_2
#define M2N_FSTORE_MODE m2n_fstore_mode_f32_2
#define M2N_FQVEC m2n_fqvec_f32_2
#define M2N_LOAD_T unsigned long long
#define M2N_STORE_T unsigned short
#define M2N_VEC 2
#include "quant_body.h"

#define M2N_QNAME m2n_quant_f32_1
#define M2N_ANAME m2n_amax_f32_1
#define M2N_FNAME m2n_fquant_f32_1
#define M2N_QVEC m2n_qvec_f32_1
#define M2N_QFVEC m2n_qfvec_f32_1
#define M2N_FVMAX(v, m) m2n_f32_amax(v, m)
#define M2N_FVMAG(m) m2n_identity(m)
#define M2N_FLOAD m2n_fload_f32_1
#define M2N_FSTORE m2n_fstore_f32_1
#define M2N_FSTORE_MODE m2n_fstore_mode_f32_1
#define M2N_FQVEC m2n_fqvec_f32_1
#define M2N_LOAD_T unsigned int
#define M2N_STORE_T unsigned char
#define M2N_VEC 1
#include "quant_body.h"

#undef M2N_ELEM_T
#undef M2N_ESZ
#undef M2N_TO_FLOAT
#undef M2N_MAG
