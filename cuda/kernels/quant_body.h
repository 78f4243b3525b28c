// quant_body.h is one quantize-pack kernel (M2N_QNAME) and one partial-amax
// kernel (M2N_ANAME) for one source type and vector width, instantiated by
// quant.h. It has no include guard on purpose.

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

#undef M2N_QNAME
#undef M2N_ANAME
#undef M2N_LOAD_T
#undef M2N_STORE_T
#undef M2N_VEC
