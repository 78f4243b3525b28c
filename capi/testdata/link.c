/* link.c: a session of two separately launched jobs through m2n.h.
 * `link listen PATH` (mpirun -np 2) is the trainer: it holds an 8x6 f32
 * matrix by rows (Shard(0)) on session ranks 0-1; `link connect PATH`
 * (mpirun -np 2, started after) is the generator, wanting it by columns
 * (Shard(1)) on session ranks 2-3. The generator first tries a port file
 * that does not exist (M2N_ERR_VALIDATION naming it), then joins; two
 * steps, every element checked. Both mpiruns need --ompi-server. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m2n.h"

static int failures, rank = -1;

#define PROG "link"
#include "check.h"

int main(int argc, char **argv) {
	if (argc != 3 || (strcmp(argv[1], "listen") != 0 && strcmp(argv[1], "connect") != 0)) {
		fprintf(stderr, "usage: link listen|connect PATH\n");
		return 2;
	}
	int provided, listen = strcmp(argv[1], "listen") == 0;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	m2n_options opts;
	m2n_options_init(&opts);
	opts.timeout_seconds = 30;
	m2n_session s = 0;
	int comm = MPI_Comm_c2f(MPI_COMM_WORLD), rc;
	if (!listen) {
		char missing[4096];
		snprintf(missing, sizeof missing, "%s.missing", argv[2]);
		rc = m2n_session_connect(comm, &opts, missing, &s);
		CHECK(rc == M2N_ERR_VALIDATION && s == 0 && strstr(last(), "missing does not exist") != NULL,
		      "connect to a missing port file: rc %d: %s", rc, last());
	}
	rc = listen ? m2n_session_listen(comm, &opts, argv[2], &s) : m2n_session_connect(comm, &opts, argv[2], &s);
	if (rc != M2N_OK) {
		fprintf(stderr, "link: %s: %s\n", argv[1], last());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	int32_t r, n;
	CHECK(m2n_session_rank(s, &r) == M2N_OK && m2n_session_size(s, &n) == M2N_OK && n == 4, "rank and size");
	rank = r;
	CHECK((listen && r < 2) || (!listen && r >= 2), "%s: session rank %d", argv[1], r);
	int64_t shape[2] = {8, 6};
	m2n_tensor t = rows_to_cols(shape);
	m2n_call c = 0;
	rc = m2n_call_prepare(s, &t, 1, "flat", &c);
	CHECK(rc == M2N_OK, "prepare: %s", last());
	int32_t held;
	int64_t lshape[2], loff[2], bytes;
	rc = m2n_tensor_part(&t, listen ? M2N_SRC : M2N_DST, rank, &held, lshape, loff, &bytes);
	CHECK(rc == M2N_OK && held, "part: rc %d", rc);
	float *local = malloc(bytes);
	for (int step = 0; step < 2 && c != 0; step++) {
		m2n_tensor_buffers b = host_buffers(listen ? M2N_SRC : M2N_DST, local, bytes, "f32");
		for (int64_t i = 0; i < lshape[0]; i++)
			for (int64_t j = 0; j < lshape[1]; j++)
				local[i * lshape[1] + j] = listen ? (float)(100 * step + (loff[0] + i) * 6 + loff[1] + j) : -1.0f;
		m2n_report rep;
		uint8_t done = 0;
		rc = m2n_call_run(c, &b, 1, 0, &rep, &done);
		CHECK(rc == M2N_OK && rep.completed == 1 && done == 1, "run: rc %d: %s", rc, last());
		for (int64_t i = 0; !listen && i < lshape[0]; i++)
			for (int64_t j = 0; j < lshape[1]; j++) {
				float want = (float)(100 * step + (loff[0] + i) * 6 + loff[1] + j);
				CHECK(local[i * lshape[1] + j] == want, "step %d element (%lld, %lld): %g, want %g", step,
				      (long long)i, (long long)j, local[i * lshape[1] + j], want);
			}
	}
	CHECK(c == 0 || m2n_call_close(c) == M2N_OK, "call close: %s", last());
	CHECK(m2n_session_close(s) == M2N_OK, "session close: %s", last());
	free(local);
	int all;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	int world_rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
	if (world_rank == 0) /* once per job */
		printf("link %s: %s\n", argv[1], all ? "FAILED" : "passed");
	MPI_Finalize();
	return all ? 1 : 0;
}
