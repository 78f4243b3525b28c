/* delta.c: delta mode through m2n.h (mpirun -np 4): ranks 0-1 hold a
 * 128x128 f32 matrix by rows (Shard(0)), ranks 2-3 want it by columns
 * (Shard(1)). Every step checks every destination element against the
 * matrix after that step's updates (each update changes about 1% of the
 * elements, to values no earlier step held), and m2n_call_delta_report
 * against m2n_report:
 *   - the first step is a full sync (delta 0, dense equal to sent, the
 *     whole matrix sent once over the ranks);
 *   - after an update, a delta step (delta 1) whose sends, summed over
 *     the ranks, are under a quarter of the dense bytes, and those the
 *     full sync's;
 *   - m2n_call_resync on rank 3 alone, after rank 2's destination was
 *     overwritten outside the call: a full sync on every rank that
 *     restores it; the step after it is a delta step again;
 *   - options of ABI version 2's size (delta set past it) join a session
 *     not in delta mode; a CUDA session in delta mode fails to join with
 *     M2N_ERR_VALIDATION naming the field delta; bad arguments are
 *     M2N_ERR_INVALID. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m2n.h"

static int failures, rank = -1;

#define PROG "delta"
#include "check.h"

#define ROWS 128
#define COLS 128
#define FULL ((int64_t)ROWS * COLS * 4) /* a full sync's bytes over all ranks: no replicas */

/* chosen reports whether update u changes global element i (1 in 100). */
static int chosen(int64_t i, int u) {
	uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)u * 0x85EBCA6Bu;
	x ^= x >> 15;
	x *= 0x2C1B3C6Du;
	x ^= x >> 12;
	return x % 100 == 0;
}

/* value is global element i after updates 1 to u. */
static float value(int64_t i, int u) {
	float v = (float)i;
	for (int k = 1; k <= u; k++)
		if (chosen(i, k))
			v = (float)(i + 100000 * k);
	return v;
}

/* This rank's part: its side, local shape and offset, and buffer. */
struct part {
	int side;
	int64_t shape[2], off[2], bytes;
	float *buf;
};

static int64_t global(const struct part *p, int64_t r, int64_t c) { return (p->off[0] + r) * COLS + p->off[1] + c; }

static void fill(struct part *p, int u) {
	for (int64_t r = 0; r < p->shape[0]; r++)
		for (int64_t c = 0; c < p->shape[1]; c++)
			p->buf[r * p->shape[1] + c] = value(global(p, r, c), u);
}

/* verify compares every destination element with update u's matrix. */
static void verify(const struct part *p, int u, const char *what) {
	int64_t wrong = 0, first = -1;
	for (int64_t r = 0; r < p->shape[0]; r++)
		for (int64_t c = 0; c < p->shape[1]; c++)
			if (p->buf[r * p->shape[1] + c] != value(global(p, r, c), u)) {
				if (first < 0)
					first = r * p->shape[1] + c;
				wrong++;
			}
	CHECK(wrong == 0, "%s: %lld of %lld destination elements wrong; first local %lld: %g, want %g", what,
	      (long long)wrong, (long long)(p->shape[0] * p->shape[1]), (long long)first,
	      first < 0 ? 0.0 : p->buf[first], first < 0 ? 0.0 : value(global(p, first / p->shape[1], first % p->shape[1]), u));
}

/* step runs one step of update u's values, checks every destination
 * element and fills dr; it returns {sent, dense} summed over the ranks. */
static void step(m2n_call c, struct part *p, int u, const char *what, m2n_delta_report *dr, int64_t sums[2]) {
	if (p->side == M2N_SRC)
		fill(p, u);
	m2n_tensor_buffers b = host_buffers(p->side, p->buf, p->bytes, NULL);
	m2n_report rep;
	int rc = m2n_call_run(c, &b, 1, 0, &rep, NULL);
	CHECK(rc == M2N_OK && rep.completed == 1, "%s: run: rc %d: %s", what, rc, last());
	memset(dr, 0xff, sizeof *dr);
	dr->struct_size = sizeof *dr;
	rc = m2n_call_delta_report(c, dr);
	CHECK(rc == M2N_OK, "%s: delta report: %s", what, last());
	CHECK(dr->sent_network == rep.sent_network && dr->sent_local == rep.sent_local && dr->copied == rep.copied,
	      "%s: the delta report's sends (%lld, %lld, %lld) are not the report's (%lld, %lld, %lld)", what,
	      (long long)dr->sent_network, (long long)dr->sent_local, (long long)dr->copied, (long long)rep.sent_network,
	      (long long)rep.sent_local, (long long)rep.copied);
	if (p->side == M2N_DST)
		verify(p, u, what);
	int64_t here[2] = {dr->sent_network + dr->sent_local + dr->copied, dr->dense_network + dr->dense_local + dr->dense_copied};
	MPI_Allreduce(here, sums, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
}

/* full checks a step that must be a full sync. */
static void full(const char *what, const m2n_delta_report *dr, const int64_t sums[2]) {
	CHECK(dr->delta == 0, "%s: delta %d, want 0 (a full sync)", what, dr->delta);
	CHECK(dr->dense_network == dr->sent_network && dr->dense_local == dr->sent_local && dr->dense_copied == dr->copied,
	      "%s: a full sync's dense bytes differ from its sent ones", what);
	CHECK(sums[0] == FULL && sums[1] == FULL, "%s: %lld bytes sent, %lld dense over the ranks; want %lld each", what,
	      (long long)sums[0], (long long)sums[1], (long long)FULL);
}

/* deltaStep checks a step that must be a delta step sending under max
 * bytes over the ranks (and some, when some is set). */
static void deltaStep(const char *what, const m2n_delta_report *dr, const int64_t sums[2], int64_t max, int some) {
	CHECK(dr->delta == 1, "%s: delta %d, want 1", what, dr->delta);
	CHECK(sums[1] == FULL, "%s: %lld dense bytes over the ranks, want a full sync's %lld", what, (long long)sums[1],
	      (long long)FULL);
	CHECK(sums[0] < max && (!some || sums[0] > 0), "%s: %lld bytes sent over the ranks, want %s under %lld", what,
	      (long long)sums[0], some ? "some, but" : "", (long long)max);
	if (rank == 0)
		printf("delta: %s: %lld of %lld dense bytes sent over the ranks\n", what, (long long)sums[0], (long long)sums[1]);
}

/* badArgs checks that bad arguments are M2N_ERR_INVALID (c: a live call). */
static void badArgs(m2n_call c) {
	m2n_delta_report dr;
	dr.struct_size = 0;
	CHECK(m2n_call_delta_report(c, &dr) == M2N_ERR_INVALID && strstr(last(), "struct_size 0") != NULL, "struct_size 0: %s",
	      last());
	CHECK(m2n_call_delta_report(c, NULL) == M2N_ERR_INVALID && strstr(last(), "NULL") != NULL, "NULL report: %s", last());
	dr.struct_size = sizeof dr;
	CHECK(m2n_call_resync(0) == M2N_ERR_INVALID && m2n_model_resync(0) == M2N_ERR_INVALID, "resync of handle 0");
	CHECK(m2n_model_delta_report(0, &dr) == M2N_ERR_INVALID, "model report of handle 0");
}

/* other checks ABI version 2's options and a CUDA session in delta mode. */
static void other(m2n_tensor *t, struct part *p) {
	m2n_options opts;
	m2n_options_init(&opts);
	opts.timeout_seconds = 30;
	opts.delta = 1; /* past version 2's size: not read */
	opts.struct_size = offsetof(m2n_options, delta);
	m2n_session s = 0;
	m2n_call c = 0;
	int rc = m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), &opts, &s);
	CHECK(rc == M2N_OK, "join with version 2's options: %s", last());
	if (rc == M2N_OK && m2n_call_prepare(s, t, 1, "flat", &c) == M2N_OK) {
		m2n_delta_report dr;
		int64_t sums[2];
		step(c, p, 0, "version 2's options, step 1", &dr, sums);
		step(c, p, 1, "version 2's options, step 2", &dr, sums);
		full("version 2's options, step 2 (not in delta mode)", &dr, sums);
	}
	CHECK(s == 0 || m2n_session_close(s) == M2N_OK, "close: %s", last());

	m2n_options_init(&opts);
	opts.timeout_seconds = 30;
	opts.device = M2N_DEVICE_CUDA;
	opts.delta = 1;
	s = 0;
	rc = m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), &opts, &s);
	char detail[4096];
	m2n_last_error_detail(detail, sizeof detail);
	CHECK(rc == M2N_ERR_VALIDATION && s == 0 && strstr(last(), "delta mode runs on the host") != NULL &&
	          strstr(detail, "\"field\":\"delta\"") != NULL,
	      "a CUDA session in delta mode: rc %d, %s", rc, detail);
}

int main(int argc, char **argv) {
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int64_t shape[2] = {ROWS, COLS};
	m2n_tensor t = rows_to_cols(shape);
	struct part p = {.side = rank < 2 ? M2N_SRC : M2N_DST};
	int32_t held = 0;
	m2n_tensor_part(&t, p.side, rank, &held, p.shape, p.off, &p.bytes);
	p.buf = malloc(p.bytes);

	m2n_options opts;
	m2n_options_init(&opts);
	opts.timeout_seconds = 30;
	opts.delta = 1;
	m2n_session s;
	m2n_call c;
	if (m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), &opts, &s) != M2N_OK || m2n_call_prepare(s, &t, 1, "flat", &c) != M2N_OK) {
		fprintf(stderr, "delta: rank %d: join or prepare: %s\n", rank, last());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	m2n_delta_report dr = {.struct_size = sizeof dr, .delta = 7, .copied = 7};
	CHECK(m2n_call_delta_report(c, &dr) == M2N_OK && dr.delta == 0 && dr.copied == 0 && dr.dense_local == 0,
	      "before the first step: delta %d, copied %lld (%s)", dr.delta, (long long)dr.copied, last());
	int64_t sums[2];
	step(c, &p, 0, "step 1", &dr, sums);
	full("step 1", &dr, sums);
	step(c, &p, 1, "step 2 (1% changed)", &dr, sums);
	deltaStep("step 2 (1% changed)", &dr, sums, FULL / 4, 1);
	step(c, &p, 1, "step 3 (nothing changed)", &dr, sums);
	deltaStep("step 3 (nothing changed)", &dr, sums, FULL / 20, 0);
	if (rank == 3)
		CHECK(m2n_call_resync(c) == M2N_OK, "resync: %s", last());
	if (rank == 2)
		memset(p.buf, 0xff, p.bytes); /* changed outside the call: NaNs */
	step(c, &p, 2, "step 4 (after rank 3's resync)", &dr, sums);
	full("step 4 (after rank 3's resync)", &dr, sums);
	step(c, &p, 3, "step 5 (1% changed)", &dr, sums);
	deltaStep("step 5 (1% changed)", &dr, sums, FULL / 4, 1);
	badArgs(c);
	CHECK(m2n_call_close(c) == M2N_OK && m2n_session_close(s) == M2N_OK, "close: %s", last());

	other(&t, &p);
	free(p.buf);
	int all;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("delta: %s\n", all ? "FAILED" : "passed");
	MPI_Finalize();
	return all ? 1 : 0;
}
