/* smoke.c uses libm2n.so as a C program does, through m2n.h (mpirun -np 4):
 * ranks 0-1 hold an 8x6 f32 matrix by rows (Shard(0)), ranks 2-3 want it
 * by columns (Shard(1)); two steps, every element checked; then a
 * placement out of range on rank 1 alone fails every rank with
 * M2N_ERR_VALIDATION naming rank 1, and the session stays usable. With
 * --no-init it checks that joining without MPI initialised is refused;
 * --sizes prints the structs' sizes (for the Python mirrors). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m2n.h"

static int failures, rank = -1;

#define PROG "smoke"
#include "check.h"

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "--sizes") == 0) {
		/* the same lines as the Go test's Python snippet prints from ctypes */
		printf("Options %zu\nSide %zu\nTensor %zu\nBuffer %zu\nTensorBuffers %zu\nReport %zu\nNamedBuffer %zu\nDeltaReport %zu\n",
		       sizeof(m2n_options), sizeof(m2n_side), sizeof(m2n_tensor), sizeof(m2n_buffer), sizeof(m2n_tensor_buffers),
		       sizeof(m2n_report), sizeof(m2n_named_buffer), sizeof(m2n_delta_report));
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--no-init") == 0) {
		m2n_session s = 0;
		int rc = m2n_session_join(0, NULL, &s);
		if (rc != M2N_ERR_INVALID || strstr(last(), "not initialised") == NULL || s != 0) {
			fprintf(stderr, "smoke: join without MPI: rc %d, %s\n", rc, last());
			return 1;
		}
		printf("smoke --no-init: refused: %s\n", last());
		return 0;
	}
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	CHECK(m2n_abi_version() == M2N_ABI_VERSION, "abi version %d", m2n_abi_version());

	m2n_options opts;
	m2n_options_init(&opts);
	CHECK(opts.struct_size == sizeof opts && opts.cuda_device == M2N_CUDA_DEVICE_LOCAL_RANK, "options_init");
	opts.timeout_seconds = 60;
	m2n_session s;
	int rc = m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), &opts, &s);
	if (rc != M2N_OK) {
		fprintf(stderr, "smoke: rank %d: join: %s\n", rank, last());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	int64_t shape[2] = {8, 6};
	int32_t bad[1] = {2};
	m2n_tensor t = rows_to_cols(shape);
	const int32_t *rows = t.src.placements;

	m2n_call c;
	rc = m2n_call_prepare(s, &t, 1, "flat", &c);
	CHECK(rc == M2N_OK, "prepare: %s", last());

	int32_t held;
	int64_t lshape[2], loff[2], bytes;
	int side = rank < 2 ? M2N_SRC : M2N_DST;
	rc = m2n_tensor_part(&t, side, rank, &held, lshape, loff, &bytes);
	CHECK(rc == M2N_OK && held && bytes == lshape[0] * lshape[1] * 4, "part: rc %d held %d", rc, held);
	float *local = malloc(bytes);
	for (int step = 0; step < 2; step++) {
		m2n_tensor_buffers b = host_buffers(rank < 2 ? M2N_SRC : M2N_DST, local, bytes, "f32");
		for (int64_t i = 0; i < lshape[0]; i++)
			for (int64_t j = 0; j < lshape[1]; j++)
				local[i * lshape[1] + j] = rank < 2 ? (float)(100 * step + (loff[0] + i) * 6 + loff[1] + j) : -1.0f;
		m2n_report rep;
		uint8_t done = 0;
		rc = m2n_call_run(c, &b, 1, 0, &rep, &done);
		CHECK(rc == M2N_OK && rep.completed == 1 && done == 1, "run: rc %d completed %lld: %s", rc,
		      (long long)rep.completed, last());
		if (rank >= 2)
			for (int64_t i = 0; i < lshape[0]; i++)
				for (int64_t j = 0; j < lshape[1]; j++) {
					float want = (float)(100 * step + (loff[0] + i) * 6 + loff[1] + j);
					CHECK(local[i * lshape[1] + j] == want, "step %d element (%lld, %lld): %g, want %g", step,
					      (long long)i, (long long)j, local[i * lshape[1] + j], want);
				}
	}

	/* rank 1 alone shards dim 2 of a 2-dim tensor */
	if (rank == 1)
		t.src.placements = bad;
	m2n_call c2 = 0;
	rc = m2n_call_prepare(s, &t, 1, NULL, &c2);
	CHECK(rc == M2N_ERR_VALIDATION && m2n_last_error_code() == M2N_ERR_VALIDATION && c2 == 0, "bad prepare: rc %d", rc);
	CHECK(strstr(last(), "rank 1") != NULL && strstr(last(), "shard dim 2") != NULL, "bad prepare: %s", last());
	char detail[4096];
	m2n_last_error_detail(detail, sizeof detail);
	CHECK(strstr(detail, "\"kind\":\"ValidationError\"") != NULL && strstr(detail, "\"rank\":1") != NULL, "detail %s",
	      detail);
	t.src.placements = rows;
	rc = m2n_call_prepare(s, &t, 1, "hier", &c2);
	CHECK(rc == M2N_OK, "prepare after the error: %s", last());
	CHECK(m2n_call_close(c2) == M2N_OK && m2n_call_close(c2) == M2N_ERR_INVALID, "closing twice");
	CHECK(m2n_call_close(c) == M2N_OK, "close: %s", last());
	CHECK(m2n_session_close(s) == M2N_OK, "session close: %s", last());
	free(local);

	int all;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("smoke: %s\n", all ? "FAILED" : "passed");
	MPI_Finalize();
	return all ? 1 : 0;
}
