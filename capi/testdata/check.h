/* check.h: what the C ABI's test programs (smoke.c, link.c, delta.c)
 * share. The including file defines PROG (its name in messages) and the
 * ints rank and failures before it includes this (after string.h). CHECK
 * counts a failed condition and prints "PROG: rank R: message"; last
 * returns the library's last error message on this thread
 * (m2n_last_error); rows_to_cols is the tensor they move, host_buffers
 * one rank's buffers of it. */
#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, "%s: rank %d: ", PROG, rank); \
			fprintf(stderr, __VA_ARGS__);             \
			fprintf(stderr, "\n");                    \
			failures++;                               \
		}                                                 \
	} while (0)

static const char *last(void) {
	static char buf[4096];
	m2n_last_error(buf, sizeof buf);
	return buf;
}

/* rows_to_cols returns tensor "w", an f32 matrix of shape (two dims; it
 * must outlive the tensor) held by rows (Shard(0)) on ranks 0-1 and wanted
 * by columns (Shard(1)) on ranks 2-3. */
static inline m2n_tensor rows_to_cols(const int64_t *shape) {
	static const int32_t one[1] = {2}, src_ranks[2] = {0, 1}, dst_ranks[2] = {2, 3}, rows[1] = {0}, cols[1] = {1};
	m2n_tensor t;
	memset(&t, 0, sizeof t);
	t.name = "w";
	t.dtype = "float32";
	t.ndim = 2;
	t.shape = shape;
	t.src = (m2n_side){.mesh_ndim = 1, .mesh_shape = one, .ranks = src_ranks, .placements = rows};
	t.dst = (m2n_side){.mesh_ndim = 1, .mesh_shape = one, .ranks = dst_ranks, .placements = cols};
	return t;
}

/* host_buffers returns the buffers of one tensor on a rank that holds one
 * side of it: bytes of host memory at data, as the source (side M2N_SRC)
 * or the destination, of element type dtype (NULL: unchecked). */
static inline m2n_tensor_buffers host_buffers(int side, void *data, int64_t bytes, const char *dtype) {
	m2n_tensor_buffers b;
	memset(&b, 0, sizeof b);
	*(side == M2N_SRC ? &b.src : &b.dst) = (m2n_buffer){.data = data, .bytes = bytes, .memory = M2N_MEMORY_HOST, .dtype = dtype};
	return b;
}
