// strided_body.h is one strided-copy body, instantiated by strided.cu for
// each element type M2N_T: the device function M2N_BODY, which copies the
// share of block `block` of a grid of `grid` blocks of the copy *p, and the
// kernel M2N_NAME, which runs it as block blockIdx.x of gridDim.x (the
// batched kernel, batch.h, runs it for virtual blocks of its items). It has
// no include guard on purpose.
M2N_INLINE void M2N_BODY(const m2n_copy_params *p, unsigned long long block, unsigned long long grid) {
	M2N_TEAMS(p->team_shift, block, grid);
#if M2N_BATCH > 1
	// Short rows (at most one element per lane): a lane alone would keep a
	// single load in flight, so it takes M2N_BATCH rows at a time, loading
	// all of them before storing any.
	if (p->chunks_per_row == 1 && p->run_elems <= team) {
		for (; item + (M2N_BATCH - 1) * step < p->items; item += M2N_BATCH * step) {
			const M2N_T *sb[M2N_BATCH];
			M2N_T *db[M2N_BATCH];
			M2N_T v[M2N_BATCH];
			M2N_UNROLL_PRAGMA
			for (int k = 0; k < M2N_BATCH; k++) {
				sb[k] = (const M2N_T *)(p->src.base + m2n_row_offset(&p->src, item + k * step));
				db[k] = (M2N_T *)(p->dst.base + m2n_row_offset(&p->dst, item + k * step));
			}
			if (lane < p->run_elems) {
				M2N_UNROLL_PRAGMA
				for (int k = 0; k < M2N_BATCH; k++) {
					v[k] = sb[k][lane];
				}
				M2N_UNROLL_PRAGMA
				for (int k = 0; k < M2N_BATCH; k++) {
					db[k][lane] = v[k];
				}
			}
		}
	}
#endif
	for (; item < p->items; item += step) {
		unsigned long long row = item, chunk = 0;
		if (p->chunks_per_row > 1) {
			row = item / p->chunks_per_row;
			chunk = item - row * p->chunks_per_row;
		}
		const M2N_T *__restrict__ s = (const M2N_T *)(p->src.base + m2n_row_offset(&p->src, row));
		M2N_T *__restrict__ d = (M2N_T *)(p->dst.base + m2n_row_offset(&p->dst, row));
		unsigned long long c = chunk * p->chunk_elems + lane;
		unsigned long long end = (chunk + 1) * p->chunk_elems;
		if (end > p->run_elems) {
			end = p->run_elems;
		}
		// Four loads in flight per thread before the stores.
		for (; c + (M2N_UNROLL - 1) * (unsigned long long)team < end; c += M2N_UNROLL * (unsigned long long)team) {
			M2N_T v0 = s[c];
			M2N_T v1 = s[c + team];
			M2N_T v2 = s[c + 2 * team];
			M2N_T v3 = s[c + 3 * team];
			d[c] = v0;
			d[c + team] = v1;
			d[c + 2 * team] = v2;
			d[c + 3 * team] = v3;
		}
		for (; c < end; c += team) {
			d[c] = s[c];
		}
	}
}

M2N_KERNEL M2N_NAME(M2N_PARAMS p) { M2N_BODY(&p, blockIdx.x, gridDim.x); }

#undef M2N_NAME
#undef M2N_BODY
#undef M2N_T
