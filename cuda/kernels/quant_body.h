// quant_body.h is one quantize-pack kernel (M2N_QNAME), one partial-amax
// kernel (M2N_ANAME) and one fused amax-quantize-pack kernel of whole
// blocks (M2N_FNAME) for one source type and vector width, instantiated by
// quant.h. It has no include guard on purpose.

// M2N_QVEC quantizes one vector by scale (rcp its reciprocal rounded) as
// the rule's true division does (m2n_qdiv, a vector at a time), for the
// fused kernels: a multiply per element; where m2n_qslow marks an element
// (a quotient near an E4M3 midpoint or a range end, a subnormal one, a
// NaN), its true division; then the conversion, with the NaN fix-up only
// for pairs with a marked element. The bytes go out as one store.
M2N_INLINE M2N_STORE_T M2N_QVEC(M2N_LOAD_T v, float scale, float rcp) {
	union {
		M2N_LOAD_T v;
		M2N_ELEM_T e[M2N_VEC];
	} x;
	x.v = v;
	float q[M2N_VEC];
	unsigned int slow = 0; // bit k: element k
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC; k++) {
		q[k] = M2N_FMUL(M2N_TO_FLOAT(x.e[k]), rcp);
		slow |= m2n_qslow(q[k]) << k;
	}
	if (slow) {
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_VEC; k++) {
			if ((slow >> k) & 1u) {
				q[k] = M2N_FDIV(M2N_TO_FLOAT(x.e[k]), scale);
			}
		}
	}
#if M2N_VEC == 1
	return (M2N_STORE_T)m2n_e4m3(q[0]);
#else
	unsigned long long out = 0;
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC; k += 2) {
		unsigned int two = m2n_e4m3x2_raw(q[k], q[k + 1]);
		if ((slow >> k) & 3u) {
			two = m2n_nanfix(two, q[k], q[k + 1]);
		}
		out |= (unsigned long long)two << (8 * k);
	}
	return (M2N_STORE_T)out;
#endif
}

// M2N_QFVEC quantizes one vector by scale (rcp its reciprocal rounded)
// through m2n_qfma, for a scale m2n_qfma_ok accepts: three floating-point
// operations per element and a conversion per pair, no test. Such a
// scale is finite, so the block holds no NaN (its amax would be one) and
// the conversion needs no NaN fix-up.
M2N_INLINE M2N_STORE_T M2N_QFVEC(M2N_LOAD_T v, float scale, float rcp) {
#if M2N_ESZ == 2 && M2N_VEC >= 2
	// bf16: a word (two elements) at a time, the bytes joined by
	// permutations rather than shifts and masks of a 64-bit value
	union {
		M2N_LOAD_T v;
		unsigned int w[M2N_VEC / 2];
	} x;
	x.v = v;
	unsigned int h[M2N_VEC / 2];
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC / 2; k++) {
		h[k] = m2n_qfma_bf16x2(x.w[k], scale, rcp);
	}
#if M2N_VEC == 2
	return (M2N_STORE_T)h[0];
#else
	union {
		M2N_STORE_T v;
		unsigned int w[M2N_VEC / 4];
	} out;
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC / 4; k++) {
		out.w[k] = m2n_pack16x2(h[2 * k], h[2 * k + 1]);
	}
	return out.v;
#endif
#else
	union {
		M2N_LOAD_T v;
		M2N_ELEM_T e[M2N_VEC];
	} x;
	x.v = v;
#if M2N_VEC == 1
	return (M2N_STORE_T)m2n_e4m3(m2n_qfma(M2N_TO_FLOAT(x.e[0]), scale, rcp));
#else
	unsigned long long out = 0;
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC; k += 2) {
		const unsigned int two = m2n_e4m3x2_raw(m2n_qfma(M2N_TO_FLOAT(x.e[k]), scale, rcp), m2n_qfma(M2N_TO_FLOAT(x.e[k + 1]), scale, rcp));
		out |= (unsigned long long)two << (8 * k);
	}
	return (M2N_STORE_T)out;
#endif
#endif
}

M2N_QKERNEL M2N_QNAME(M2N_QPARAMS p) {
	M2N_TEAMS(p.team_shift, (unsigned long long)blockIdx.x, (unsigned long long)gridDim.x);
	const unsigned long long lo_c = p.lo[p.nd - 1];
	for (; item < p.items; item += step) {
		unsigned long long row = item, chunk = 0;
		if (p.chunks_per_row > 1) {
			row = item / p.chunks_per_row;
			chunk = item - row * p.chunks_per_row;
		}
		const unsigned char *s = (const unsigned char *)(p.src.base + m2n_row_offset(&p.src, row));
		unsigned char *d = (unsigned char *)(p.dst + row * p.row_elems);
		const float *sc = (const float *)p.win + m2n_win_row(&p, row);
		unsigned long long end = (chunk + 1) * p.chunk_elems;
		if (end > p.row_elems) {
			end = p.row_elems;
		}
		// M2N_QLOADS vectors in flight per lane: all loaded before any is
		// converted (the plan sizes teams so that a lane has that many).
		const unsigned long long stride = (unsigned long long)team * M2N_VEC;
		for (unsigned long long c = chunk * p.chunk_elems + lane * M2N_VEC; c < end; c += M2N_QLOADS * stride) {
			union {
				M2N_LOAD_T v;
				M2N_ELEM_T e[M2N_VEC];
			} in[M2N_QLOADS];
			M2N_UNROLL_PRAGMA
			for (int u = 0; u < M2N_QLOADS; u++) {
				if (c + u * stride < end) {
					in[u].v = *(const M2N_LOAD_T *)(s + (c + u * stride) * M2N_ESZ);
				}
			}
			M2N_UNROLL_PRAGMA
			for (int u = 0; u < M2N_QLOADS; u++) {
				const unsigned long long cu = c + u * stride;
				if (cu < end) {
					const float scale = sc[m2n_block_col(&p, lo_c + cu)];
					const float rcp = M2N_FRCP(scale);
					// m2n_qfma where the scale allows it and the vector's
					// quotients are finite (here the scale comes from a
					// window: its elements need not be its block's)
					if (p.div_mode == 2 && m2n_qfma_ok(scale) && M2N_FVMAG(M2N_FVMAX(in[u].v, 0u)) <= m2n_qfma_lim(scale)) {
						*(M2N_STORE_T *)(d + cu) = M2N_QFVEC(in[u].v, scale, rcp);
						continue;
					}
					union {
						M2N_STORE_T v;
						unsigned char b[M2N_VEC];
					} out;
#if M2N_VEC == 1
					out.b[0] = (unsigned char)m2n_e4m3(m2n_qdiv(M2N_TO_FLOAT(in[u].e[0]), scale, rcp));
#else
					M2N_UNROLL_PRAGMA
					for (int k = 0; k < M2N_VEC; k += 2) {
						const unsigned int two = m2n_e4m3x2(m2n_qdiv(M2N_TO_FLOAT(in[u].e[k]), scale, rcp),
						                                    m2n_qdiv(M2N_TO_FLOAT(in[u].e[k + 1]), scale, rcp));
						out.b[k] = (unsigned char)two;
						out.b[k + 1] = (unsigned char)(two >> 8);
					}
#endif
					*(M2N_STORE_T *)(d + cu) = out.v;
				}
			}
		}
	}
}

M2N_KERNEL M2N_ANAME(M2N_QPARAMS p) {
	M2N_TEAMS(p.team_shift, (unsigned long long)blockIdx.x, (unsigned long long)gridDim.x);
	const unsigned long long lo_r = p.lo[p.nd - 2], ext_r = p.ext[p.nd - 2];
	const unsigned long long lo_c = p.lo[p.nd - 1], ext_c = p.ext[p.nd - 1];
	const unsigned long long g = p.group, pc = p.chunk_elems;
	for (; item < p.items; item += step) {
		const unsigned long long piece = item % p.chunks_per_row;
		const unsigned long long t = item / p.chunks_per_row;
		const unsigned long long grp = t % p.groups;
		const unsigned long long mat = t / p.groups;
		// this item's rows [r0, r1) and columns [c0, c1), box-relative
		const unsigned long long g0 = (lo_r / g + grp) * g;
		const unsigned long long r0 = (g0 > lo_r ? g0 : lo_r) - lo_r;
		const unsigned long long r1 = (g0 + g < lo_r + ext_r ? g0 + g : lo_r + ext_r) - lo_r;
		const unsigned long long p0 = (lo_c / pc + piece) * pc;
		const unsigned long long c0 = (p0 > lo_c ? p0 : lo_c) - lo_c;
		const unsigned long long c1 = (p0 + pc < lo_c + ext_c ? p0 + pc : lo_c + ext_c) - lo_c;
		unsigned int m = 0;
		for (unsigned long long r = r0; r < r1; r++) {
			const unsigned char *s = (const unsigned char *)(p.src.base + m2n_row_offset(&p.src, mat * ext_r + r));
			for (unsigned long long c = c0 + lane * M2N_VEC; c < c1; c += (unsigned long long)team * M2N_VEC) {
				union {
					M2N_LOAD_T v;
					M2N_ELEM_T e[M2N_VEC];
				} in;
				in.v = *(const M2N_LOAD_T *)(s + c * M2N_ESZ);
				M2N_UNROLL_PRAGMA
				for (int k = 0; k < M2N_VEC; k++) {
					const unsigned int a = M2N_MAG(in.e[k]);
					m = a > m ? a : m;
				}
			}
		}
		const long long wi = m2n_win_row(&p, mat * ext_r + r0) + (long long)m2n_block_col(&p, lo_c + c0);
		m2n_amax_commit((unsigned int *)p.win + wi, m, lane, team);
	}
}

// The fused amax-quantize-pack kernel (M2N_FNAME) of whole blocks: a team
// of threads per block of the box (m2n_fused_tile), which must lie wholly
// inside the box (no other rank holds a part of it, so its amax needs no
// exchange); the plan sizes teams for M2N_FREGS vectors per lane, up to a
// thread block (a 128x128 block takes all 256 threads, a row of 128 bf16
// elements 2). A team loads its block once, keeping up to M2N_FREGS
// vectors per lane (in shared memory where M2N_FSTAGE, else in registers;
// a 128x128 bf16 block is 8 per thread;
// larger blocks, rows of more than 16384 bf16 elements or f32 blocks, read
// the rest again), reduces its amax, writes its scale and quantizes from
// where it kept them. M2N_FLOAD and M2N_FSTORE are one lane's halves, shared by
// the GPU kernel and its emulation.

// M2N_FSTAGE: on GPUs with asynchronous copies to shared memory (sm_80
// on) and vectors of 4 bytes or more, the fused kernel stages a lane's
// vectors in shared memory (its k-th at in[k * M2N_FISTRIDE], M2N_FISTRIDE =
// M2N_FTHREADS) instead of registers: the copies in flight hold no
// registers, so more blocks fit on an SM and more of the tensor is in
// flight. A lane reads back only what it copied itself, after waiting for
// its own copies, so no barrier is needed for the data.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && M2N_VEC * M2N_ESZ >= 4
#define M2N_FSTAGE 1
#define M2N_FISTRIDE M2N_FTHREADS
#else
#define M2N_FSTAGE 0
#define M2N_FISTRIDE 1
#endif

// M2N_FLOAD loads lane tid's vectors of tile t (of a team of nt), keeping
// the first M2N_FREGS in in[], and returns the largest magnitude among them.
M2N_INLINE unsigned int M2N_FLOAD(const m2n_quant_params *p, const m2n_fused_tile *t, unsigned int tid, unsigned int nt, M2N_LOAD_T *in) {
	unsigned long long r, cv, dr, dc;
	m2n_fused_start(t->vpr, tid, nt, &r, &cv, &dr, &dc);
	unsigned int m = 0;
	union {
		M2N_LOAD_T v;
		M2N_ELEM_T e[M2N_VEC];
	} x;
	if (t->lin && dc == 0 && m2n_fused_narrow(t->rows, dr * t->sstride)) {
		// rows at one stride, whole rows per step, counts and steps in 32
		// bits: slot k's address is one wide multiply-add from the lane's
		// first
		const unsigned char *sp = (const unsigned char *)(p->src.base + t->soff + r * t->sstride + (t->c0 + cv * M2N_VEC) * M2N_ESZ);
		const unsigned int rows = (unsigned int)t->rows, r0 = (unsigned int)r, d = (unsigned int)dr;
		const unsigned int step = (unsigned int)(dr * t->sstride);
#if M2N_FSTAGE
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (r0 + (unsigned int)k * d < rows) {
				m2n_cp_async(&in[k * M2N_FISTRIDE], sp + (unsigned long long)k * step, M2N_VEC * M2N_ESZ);
			}
		}
		m2n_cp_async_wait();
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (r0 + (unsigned int)k * d < rows) {
				x.v = in[k * M2N_FISTRIDE];
				m = M2N_FVMAX(x.v, m);
			}
		}
#else
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (r0 + (unsigned int)k * d < rows) {
				x.v = *(const M2N_LOAD_T *)(sp + (unsigned long long)k * step);
				in[k] = x.v;
				m = M2N_FVMAX(x.v, m);
			}
		}
#endif
		sp += (unsigned long long)M2N_FREGS * step;
		for (unsigned int rr = r0 + M2N_FREGS * d; rr < rows; sp += step, rr += d) {
			x.v = *(const M2N_LOAD_T *)sp;
			m = M2N_FVMAX(x.v, m);
		}
		return M2N_FVMAG(m);
	}
	if (t->rows == 1u && m2n_fused_narrow(t->vpr, 0)) {
		// a one-row tile (row scaling's): the lane's vectors are every
		// nt-th of the row from its tid-th, one row offset for all (the
		// tile's soff: one row always lies in one innermost run)
		const unsigned char *sp = (const unsigned char *)(p->src.base + (t->lin ? t->soff : m2n_row_offset(&p->src, t->row0)) + (t->c0 + tid * M2N_VEC) * M2N_ESZ);
		const unsigned int vpr = (unsigned int)t->vpr;
		const unsigned long long step = (unsigned long long)nt * (M2N_VEC * M2N_ESZ);
#if M2N_FSTAGE
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (tid + (unsigned int)k * nt < vpr) {
				m2n_cp_async(&in[k * M2N_FISTRIDE], sp + (unsigned long long)k * step, M2N_VEC * M2N_ESZ);
			}
		}
		m2n_cp_async_wait();
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (tid + (unsigned int)k * nt < vpr) {
				x.v = in[k * M2N_FISTRIDE];
				m = M2N_FVMAX(x.v, m);
			}
		}
#else
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (tid + (unsigned int)k * nt < vpr) {
				x.v = *(const M2N_LOAD_T *)(sp + (unsigned long long)k * step);
				in[k] = x.v;
				m = M2N_FVMAX(x.v, m);
			}
		}
#endif
		sp += (unsigned long long)M2N_FREGS * step;
		for (unsigned long long c = tid + M2N_FREGS * nt; c < t->vpr; sp += step, c += nt) {
			x.v = *(const M2N_LOAD_T *)sp;
			m = M2N_FVMAX(x.v, m);
		}
		return M2N_FVMAG(m);
	}
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_FREGS; k++) {
		if (r < t->rows) {
			x.v = *(const M2N_LOAD_T *)(p->src.base + m2n_row_offset(&p->src, t->row0 + r) + (t->c0 + cv * M2N_VEC) * M2N_ESZ);
			in[k * M2N_FISTRIDE] = x.v;
			M2N_UNROLL_PRAGMA
			for (int j = 0; j < M2N_VEC; j++) {
				const unsigned int a = M2N_MAG(x.e[j]);
				m = a > m ? a : m;
			}
			M2N_FSTEP(r, cv, dr, dc, t->vpr);
		}
	}
	while (r < t->rows) {
		x.v = *(const M2N_LOAD_T *)(p->src.base + m2n_row_offset(&p->src, t->row0 + r) + (t->c0 + cv * M2N_VEC) * M2N_ESZ);
		M2N_UNROLL_PRAGMA
		for (int j = 0; j < M2N_VEC; j++) {
			const unsigned int a = M2N_MAG(x.e[j]);
			m = a > m ? a : m;
		}
		M2N_FSTEP(r, cv, dr, dc, t->vpr);
	}
	return m;
}

// M2N_FQVEC quantizes one vector by scale (rcp its reciprocal), each
// quotient made exact by m2n_qdiv (mode 0), m2n_q2_bracket (mode 1) or
// m2n_qfma (mode 2: M2N_FSTORE asks for it only where m2n_qfma_ok).
M2N_INLINE M2N_STORE_T M2N_FQVEC(M2N_LOAD_T v, float scale, float rcp, unsigned long long mode) {
	if (mode == 2) {
		return M2N_QFVEC(v, scale, rcp);
	}
	if (mode != 1) {
		return M2N_QVEC(v, scale, rcp);
	}
	union {
		M2N_LOAD_T v;
		M2N_ELEM_T e[M2N_VEC];
	} x;
	x.v = v;
	union {
		M2N_STORE_T v;
		unsigned char b[M2N_VEC];
	} out;
#if M2N_VEC == 1
	out.b[0] = (unsigned char)m2n_q1_bracket(M2N_TO_FLOAT(x.e[0]), scale, rcp);
#else
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_VEC; k += 2) {
		const unsigned int two = m2n_q2_bracket(M2N_TO_FLOAT(x.e[k]), M2N_TO_FLOAT(x.e[k + 1]), scale, rcp);
		out.b[k] = (unsigned char)two;
		out.b[k + 1] = (unsigned char)(two >> 8);
	}
#endif
	return out.v;
}

// M2N_FSTORE_MODE is M2N_FSTORE in division mode `mode` (rcp the scale's
// reciprocal).
M2N_INLINE void M2N_FSTORE_MODE(const m2n_quant_params *p, const m2n_fused_tile *t, unsigned int tid, unsigned int nt, const M2N_LOAD_T *in, float scale,
                                float rcp, unsigned long long mode) {
	unsigned long long r, cv, dr, dc;
	m2n_fused_start(t->vpr, tid, nt, &r, &cv, &dr, &dc);
	unsigned char *d = (unsigned char *)p->dst + t->c0;
	if (t->lin && dc == 0 && m2n_fused_narrow(t->rows, dr * t->sstride) && m2n_fused_narrow(0, dr * p->row_elems)) {
		// as in M2N_FLOAD: 32-bit counts and steps
		const unsigned char *sp = (const unsigned char *)(p->src.base + t->soff + r * t->sstride + (t->c0 + cv * M2N_VEC) * M2N_ESZ);
		unsigned char *dp = d + (t->row0 + r) * p->row_elems + cv * M2N_VEC;
		const unsigned int rows = (unsigned int)t->rows, r0 = (unsigned int)r, dr32 = (unsigned int)dr;
		const unsigned int step = (unsigned int)(dr * t->sstride), dstep = (unsigned int)(dr * p->row_elems);
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (r0 + (unsigned int)k * dr32 < rows) {
				*(M2N_STORE_T *)(dp + (unsigned long long)k * dstep) = M2N_FQVEC(in[k * M2N_FISTRIDE], scale, rcp, mode);
			}
		}
		sp += (unsigned long long)M2N_FREGS * step, dp += (unsigned long long)M2N_FREGS * dstep;
		for (unsigned int rr = r0 + M2N_FREGS * dr32; rr < rows; sp += step, dp += dstep, rr += dr32) {
			*(M2N_STORE_T *)dp = M2N_FQVEC(*(const M2N_LOAD_T *)sp, scale, rcp, mode);
		}
		return;
	}
	if (t->rows == 1u && m2n_fused_narrow(t->vpr, 0)) {
		// as in M2N_FLOAD: every nt-th vector of the one row
		const unsigned char *sp = (const unsigned char *)(p->src.base + (t->lin ? t->soff : m2n_row_offset(&p->src, t->row0)) + (t->c0 + tid * M2N_VEC) * M2N_ESZ);
		unsigned char *dp = d + t->row0 * p->row_elems + tid * M2N_VEC;
		const unsigned int vpr = (unsigned int)t->vpr;
		const unsigned long long step = (unsigned long long)nt * (M2N_VEC * M2N_ESZ), dstep = (unsigned long long)nt * M2N_VEC;
		M2N_UNROLL_PRAGMA
		for (int k = 0; k < M2N_FREGS; k++) {
			if (tid + (unsigned int)k * nt < vpr) {
				*(M2N_STORE_T *)(dp + (unsigned long long)k * dstep) = M2N_FQVEC(in[k * M2N_FISTRIDE], scale, rcp, mode);
			}
		}
		sp += (unsigned long long)M2N_FREGS * step, dp += (unsigned long long)M2N_FREGS * dstep;
		for (unsigned long long c = tid + M2N_FREGS * nt; c < t->vpr; sp += step, dp += dstep, c += nt) {
			*(M2N_STORE_T *)dp = M2N_FQVEC(*(const M2N_LOAD_T *)sp, scale, rcp, mode);
		}
		return;
	}
	M2N_UNROLL_PRAGMA
	for (int k = 0; k < M2N_FREGS; k++) {
		if (r < t->rows) {
			*(M2N_STORE_T *)(d + (t->row0 + r) * p->row_elems + cv * M2N_VEC) = M2N_FQVEC(in[k * M2N_FISTRIDE], scale, rcp, mode);
			M2N_FSTEP(r, cv, dr, dc, t->vpr);
		}
	}
	while (r < t->rows) {
		const M2N_LOAD_T v = *(const M2N_LOAD_T *)(p->src.base + m2n_row_offset(&p->src, t->row0 + r) + (t->c0 + cv * M2N_VEC) * M2N_ESZ);
		*(M2N_STORE_T *)(d + (t->row0 + r) * p->row_elems + cv * M2N_VEC) = M2N_FQVEC(v, scale, rcp, mode);
		M2N_FSTEP(r, cv, dr, dc, t->vpr);
	}
}

// M2N_FSTORE quantizes and packs lane tid's vectors of tile t by scale:
// the first M2N_FREGS from in[], the rest read again. It calls
// M2N_FSTORE_MODE with the common mode 2 spelled out, so that its copy
// tests no mode per vector.
M2N_INLINE void M2N_FSTORE(const m2n_quant_params *p, const m2n_fused_tile *t, unsigned int tid, unsigned int nt, const M2N_LOAD_T *in, float scale) {
	const float rcp = M2N_FRCP(scale);
	// the tile's mode: m2n_qfma only for a scale it is exact for
	const unsigned long long mode = p->div_mode == 2 && !m2n_qfma_ok(scale) ? 0 : p->div_mode;
	if (mode == 2) {
		M2N_FSTORE_MODE(p, t, tid, nt, in, scale, rcp, 2);
	} else {
		M2N_FSTORE_MODE(p, t, tid, nt, in, scale, rcp, mode);
	}
}

#ifdef __CUDACC__
M2N_FKERNEL M2N_FNAME(M2N_QPARAMS p) {
	// Teams of 2^team_shift threads, a tile each. A team of up to a warp
	// reduces its amax with shuffles alone; a larger one (at most 4 teams of
	// 64 or more per block) through red[i % 3][team] over the barrier of
	// round i: its lane 0 clears red[(i + 2) % 3][team] after that barrier,
	// when every lane has read round i-1's value and none can reach round
	// i+2's atomics before the barrier of round i+1, so one barrier per
	// round suffices. Rounds are uniform over the block (a team past the
	// last item idles through them), so every thread meets every barrier.
	__shared__ unsigned int red[3][4];
#if M2N_FSTAGE
	__shared__ M2N_LOAD_T stage[M2N_FREGS * M2N_FTHREADS];
#endif
	const unsigned int shift = (unsigned int)p.team_shift;
	const unsigned int team = 1u << shift;
	const unsigned int lane = threadIdx.x & (team - 1u);
	const unsigned int tix = threadIdx.x >> shift;
	const unsigned long long teams = (unsigned long long)(blockDim.x >> shift);
	if (teams == 0) {
		return;
	}
	if (threadIdx.x < 12u) {
		red[threadIdx.x / 4u][threadIdx.x % 4u] = 0u;
	}
	__syncthreads();
	unsigned int it = 0;
	for (unsigned long long base = blockIdx.x * teams; base < p.items; base += gridDim.x * teams) {
		const unsigned long long item = base + tix;
		const bool valid = item < p.items;
		m2n_fused_tile t = {0, 0, 0, 1, 0, 0, 0, 0};
#if M2N_FSTAGE
		M2N_LOAD_T *in = stage + threadIdx.x;
#else
		M2N_LOAD_T in[M2N_FREGS];
#endif
		unsigned int m = 0;
		if (valid) {
			t = m2n_fused_tile_of(&p, item, M2N_VEC);
			m = M2N_FLOAD(&p, &t, lane, team, in);
		}
		const unsigned int width = team < 32u ? team : 32u;
		for (unsigned int off = width / 2u; off > 0u; off /= 2u) {
			const unsigned int o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
			m = o > m ? o : m;
		}
		if (team > 32u) {
			if ((threadIdx.x & 31u) == 0u) {
				atomicMax(&red[it][tix], m);
			}
			__syncthreads();
			m = red[it][tix];
			if (lane == 0u) {
				red[it == 0u ? 2u : it - 1u][tix] = 0u;
			}
			it = it == 2u ? 0u : it + 1u;
		}
		if (valid) {
			const float scale = m2n_fused_scale(m);
			if (lane == 0u) {
				((float *)p.win)[t.wi] = scale;
			}
			M2N_FSTORE(&p, &t, lane, team, in, scale);
		}
	}
}
#else
// The emulation runs a thread block as its thread 0: per team, every
// lane's load, the reduction, then every lane's store, as the shuffles and
// the barrier order them.
M2N_KERNEL M2N_FNAME(M2N_QPARAMS p) {
	const unsigned int team = 1u << (unsigned int)p.team_shift;
	const unsigned long long teams = (unsigned long long)(blockDim.x >> (unsigned int)p.team_shift);
	if (threadIdx.x != 0u || blockDim.x > M2N_FTHREADS || teams == 0) {
		return;
	}
	M2N_LOAD_T in[M2N_FTHREADS][M2N_FREGS];
	for (unsigned long long base = blockIdx.x * teams; base < p.items; base += gridDim.x * teams) {
		for (unsigned long long tix = 0; tix < teams && base + tix < p.items; tix++) {
			const m2n_fused_tile t = m2n_fused_tile_of(&p, base + tix, M2N_VEC);
			unsigned int m = 0;
			for (unsigned int lane = 0; lane < team; lane++) {
				const unsigned int a = M2N_FLOAD(&p, &t, lane, team, in[lane]);
				m = a > m ? a : m;
			}
			const float scale = m2n_fused_scale(m);
			((float *)p.win)[t.wi] = scale;
			for (unsigned int lane = 0; lane < team; lane++) {
				M2N_FSTORE(&p, &t, lane, team, in[lane], scale);
			}
		}
	}
}
#endif

#undef M2N_QNAME
#undef M2N_FNAME
#undef M2N_FLOAD
#undef M2N_FSTORE
#undef M2N_FSTORE_MODE
#undef M2N_FQVEC
#undef M2N_QVEC
#undef M2N_QFVEC
#undef M2N_FVMAX
#undef M2N_FVMAG
#undef M2N_ANAME
#undef M2N_LOAD_T
#undef M2N_STORE_T
#undef M2N_VEC
#undef M2N_FSTAGE
#undef M2N_FISTRIDE
