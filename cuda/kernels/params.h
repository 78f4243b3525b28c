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

#endif
