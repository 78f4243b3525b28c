// params.h is the one definition of the strided-copy kernel's parameter block.
// The Go side fills it through cgo and NVRTC compiles it into the kernel, so
// both read the same layout. Every field is 64-bit: no padding to agree on.
#ifndef M2N_PARAMS_H
#define M2N_PARAMS_H

#define M2N_MAX_DIMS 8

// m2n_side addresses the rows of one side of a copy: row r starts at
// base + sum_i idx_i * stride[i], where idx is r written in the mixed radix
// count[0..nd), outermost first.
typedef struct m2n_side {
	unsigned long long base;
	unsigned long long nd;
	unsigned long long count[M2N_MAX_DIMS];
	unsigned long long stride[M2N_MAX_DIMS];
} m2n_side;

// m2n_copy_params describes rows*run_elems elements of the kernel's width.
// Work items are (row, chunk) pairs, item = row*chunks_per_row + chunk; a team
// of 1<<team_shift threads copies one item's chunk_elems elements.
typedef struct m2n_copy_params {
	m2n_side src;
	m2n_side dst;
	unsigned long long rows;
	unsigned long long run_elems;
	unsigned long long chunk_elems;
	unsigned long long chunks_per_row;
	unsigned long long items;
	unsigned long long team_shift;
} m2n_copy_params;

// m2n_batch_item is one copy of a batched launch (m2n_batch, batch.h): its
// parameter block, the element width of the body that copies it (16, 8, 4,
// 2 or 1 bytes), and the launch's virtual blocks it owns, [first,
// first+blocks): virtual block first+b runs the copy as block b of a grid of
// `blocks`, exactly as a launch of its own would.
typedef struct m2n_batch_item {
	m2n_copy_params p;
	unsigned long long width;
	unsigned long long first;
	unsigned long long blocks;
} m2n_batch_item;

// m2n_batch_params is the batched kernel's parameter block: `count` items in
// device memory at `items`, sorted by first, with no gaps (item i+1 starts
// where item i ends), `blocks` virtual blocks in all.
typedef struct m2n_batch_params {
	unsigned long long items;
	unsigned long long count;
	unsigned long long blocks;
} m2n_batch_params;

// m2n_quant_params describes a quantize-pack (m2n_quant_*) or partial-amax
// (m2n_amax_*) launch over a box of a tensor (fp8/ in Go has the rule and
// the reference). The box's rows (one per index of its outer dims, each
// row_elems elements along the last dim) sit in the source at src; a row r
// is quantized into dst + r*row_elems. win is the window of block values
// (float scales for quantize, amax bits as unsigned ints for amax) over the
// blocks wlo..: block coordinates (the leading dims' indices, then the
// block row and column) map to win[sum (b_i - wlo[i]) * wstride[i]].
//
// Quantize work items are (row, chunk) pairs, item = row*chunks_per_row +
// chunk, chunk_elems elements each. Amax work items are (matrix, row group,
// piece) triples, item = (matrix*groups + group)*chunks_per_row + piece: a
// group is up to `group` box rows of one block row, a piece up to
// chunk_elems columns of one block column (both aligned to the global
// tensor), so that each item ends in one atomic max per team.
typedef struct m2n_quant_params {
	m2n_side src;
	unsigned long long dst;
	unsigned long long win;
	unsigned long long nd;
	unsigned long long lo[M2N_MAX_DIMS];
	unsigned long long ext[M2N_MAX_DIMS];
	unsigned long long wlo[M2N_MAX_DIMS];
	unsigned long long wstride[M2N_MAX_DIMS];
	unsigned long long block_rows;
	unsigned long long block_cols;
	unsigned long long col_shift; // log2(block_cols) when a power of two, else 64
	unsigned long long row_elems;
	unsigned long long chunk_elems;
	unsigned long long chunks_per_row;
	unsigned long long group;
	unsigned long long groups;
	unsigned long long items;
	unsigned long long team_shift;
	// how an element's quotient is made exact (0: the true division near
	// an E4M3 midpoint, m2n_qdiv; 1, fused kernels only: the bracket test,
	// m2n_q2_bracket; 2: the corrected multiply, m2n_qfma, in blocks whose
	// scale m2n_qfma_ok accepts, else mode 0)
	unsigned long long div_mode;
} m2n_quant_params;

#endif
