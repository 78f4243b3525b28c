// batch.h: the batched copy kernel, included by strided.cu after the bodies
// it calls (NVRTC at run time; emu.c for the CPU).
//
// m2n_batch runs many copies, each a source and a destination region of any
// shape and size (planned as the copy kernels plan them, each with its own
// element width and team size), in one launch: the launch's virtual blocks
// are dealt to the items in order (an item owns as many as its own launch
// would have), each block of the grid strides over the virtual blocks, finds
// the item of each by binary search, and runs that item's body as the block
// of the item's own grid. On the GPU the item's parameter block is staged in
// shared memory, so that the body reads it as fast as a launch's own
// parameters; in the emulator every thread reads it in place.
M2N_KERNEL m2n_batch(M2N_BPARAMS bp) {
	const m2n_batch_item *items = (const m2n_batch_item *)bp.items;
#ifdef __CUDACC__
	__shared__ m2n_batch_item staged;
#endif
	for (unsigned long long vb = blockIdx.x; vb < bp.blocks; vb += gridDim.x) {
		unsigned long long lo = 0, hi = bp.count - 1;
		while (lo < hi) {
			const unsigned long long mid = (lo + hi + 1) / 2;
			if (items[mid].first <= vb) {
				lo = mid;
			} else {
				hi = mid - 1;
			}
		}
#ifdef __CUDACC__
		__syncthreads(); // every thread is done with the previous item
		{
			const unsigned long long *from = (const unsigned long long *)(items + lo);
			unsigned long long *to = (unsigned long long *)&staged;
			for (unsigned int k = threadIdx.x; k < sizeof(m2n_batch_item) / 8; k += blockDim.x) {
				to[k] = from[k];
			}
		}
		__syncthreads();
		const m2n_batch_item *it = &staged;
#else
		const m2n_batch_item *it = items + lo;
#endif
		const unsigned long long block = vb - it->first;
		switch (it->width) {
		case 16: m2n_body16(&it->p, block, it->blocks); break;
		case 8: m2n_body8(&it->p, block, it->blocks); break;
		case 4: m2n_body4(&it->p, block, it->blocks); break;
		case 2: m2n_body2(&it->p, block, it->blocks); break;
		default: m2n_body1(&it->p, block, it->blocks); break;
		}
	}
}
