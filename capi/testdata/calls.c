/* calls.c drives several calls of one session through m2n.h in orders and
 * thread interleavings that differ between ranks, on purpose, and checks
 * that every run either returns M2N_OK with its own call's data in every
 * destination element, or M2N_ERR_CALL_MISMATCH naming both calls with
 * every destination element untouched: never the other call's data, never
 * another error. capi_test.go runs it (TestCCallsCrossed, TestCCallsThreads)
 * and fuzzes its arguments (FuzzCABI).
 *
 * The calls have the same layout and tensor name ("w", rows x cols int32,
 * 160x120 = 19,200 elements by default): only their order of preparation
 * tells them apart. Sources fill call k's step s with
 * (k+1)*10000000 + (s%50)*200000 + global index; destinations start each
 * run poisoned (-1).
 *
 * Arguments, key=value:
 *   calls=K            calls prepared (1 to 3), named a, b, c
 *   order=O0,O1,...    single thread: rank r runs the letters of Or in turn
 *                      (a rank without one runs the last); every Or the same length
 *   threads=T          T > 1: thread k of every rank runs call k steps=N times
 *   steps=N            runs per thread (threads > 1)
 *   layout=L           0: S0 -> S1; 1: S1 -> R,S0 (dst mesh 2 x n); 2: R -> S0; 3: S0 -> R
 *   src=M              source ranks 0..M-1; the rest are destinations (default world/2)
 *   rows=R cols=C      the tensor's shape (160, 120)
 *   route=flat|agbcast|hier|auto
 *   verify=0|1 atomic=0|1 stripe=0|1 timeout=SECONDS coalesce=BYTES chunk=BYTES dstdom=N
 *   badtimeout=R:VALUE rank R joins with timeout_seconds VALUE (strtod: nan, inf, -1, 1e300);
 *                      every rank prints its join's outcome ("join rank=.. rc=.. detail=..")
 *                      and, if it failed, ends there
 *   jitter=US seed=S   sleep up to US microseconds (pseudo-random, from S) before each run
 *
 * Output: a line per run ("run rank=.. thread=.. call=.. step=.. rc=.."), a
 * summary per rank ("summary rank=.. ok=.. mismatch=.."), and on rank 0
 * "calls: passed" or "calls: FAILED". */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "m2n.h"

#define MAXCALLS 3
#define MAXRANKS 16

static int rank = -1, world = 0, failures;
static pthread_mutex_t outmu = PTHREAD_MUTEX_INITIALIZER;

#define FAIL(...)                                                 \
	do {                                                      \
		pthread_mutex_lock(&outmu);                       \
		fprintf(stderr, "calls: rank %d: ", rank);        \
		fprintf(stderr, __VA_ARGS__);                     \
		fprintf(stderr, "\n");                            \
		failures++;                                       \
		pthread_mutex_unlock(&outmu);                     \
	} while (0)

static struct {
	int calls, threads, steps, layout, src, verify, atomic, stripe, dstdom;
	int64_t rows, cols, coalesce, chunk;
	double timeout;
	const char *route;
	char order[MAXRANKS][64];
	int norders;
	int badrank;
	const char *badvalue;
	int jitter;
	unsigned seed;
} cfg = {.calls = 2, .threads = 1, .steps = 2, .rows = 160, .cols = 120, .timeout = 30, .route = "flat",
	 .src = -1, .badrank = -1};

static void parse(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		char *k = argv[i], *v = strchr(argv[i], '=');
		if (v == NULL) {
			fprintf(stderr, "calls: argument %s: want key=value\n", k);
			exit(2);
		}
		*v++ = 0;
		if (!strcmp(k, "calls")) cfg.calls = atoi(v);
		else if (!strcmp(k, "threads")) cfg.threads = atoi(v);
		else if (!strcmp(k, "steps")) cfg.steps = atoi(v);
		else if (!strcmp(k, "layout")) cfg.layout = atoi(v);
		else if (!strcmp(k, "src")) cfg.src = atoi(v);
		else if (!strcmp(k, "rows")) cfg.rows = atoll(v);
		else if (!strcmp(k, "cols")) cfg.cols = atoll(v);
		else if (!strcmp(k, "route")) cfg.route = v;
		else if (!strcmp(k, "verify")) cfg.verify = atoi(v);
		else if (!strcmp(k, "atomic")) cfg.atomic = atoi(v);
		else if (!strcmp(k, "stripe")) cfg.stripe = atoi(v);
		else if (!strcmp(k, "timeout")) cfg.timeout = strtod(v, NULL);
		else if (!strcmp(k, "coalesce")) cfg.coalesce = atoll(v);
		else if (!strcmp(k, "chunk")) cfg.chunk = atoll(v);
		else if (!strcmp(k, "dstdom")) cfg.dstdom = atoi(v);
		else if (!strcmp(k, "jitter")) cfg.jitter = atoi(v);
		else if (!strcmp(k, "seed")) cfg.seed = (unsigned)strtoul(v, NULL, 10);
		else if (!strcmp(k, "badtimeout")) {
			cfg.badrank = atoi(v);
			char *c = strchr(v, ':');
			cfg.badvalue = c ? c + 1 : "nan";
		} else if (!strcmp(k, "order")) {
			for (char *tok = strtok(v, ","); tok && cfg.norders < MAXRANKS; tok = strtok(NULL, ","))
				snprintf(cfg.order[cfg.norders++], sizeof cfg.order[0], "%s", tok);
		} else {
			fprintf(stderr, "calls: unknown argument %s\n", k);
			exit(2);
		}
	}
	if (cfg.calls < 1 || cfg.calls > MAXCALLS || cfg.threads < 1 || cfg.threads > MAXCALLS) {
		fprintf(stderr, "calls: calls %d, threads %d: want 1 to %d\n", cfg.calls, cfg.threads, MAXCALLS);
		exit(2);
	}
	if (cfg.threads > cfg.calls)
		cfg.threads = cfg.calls;
}

static const char *last(char *buf, size_t n) {
	m2n_last_error(buf, n);
	return buf;
}

/* The layout's meshes and placements. */
static int32_t src_shape[1], src_ranks[MAXRANKS], src_pl[1];
static int32_t dst_shape[2], dst_ranks[MAXRANKS], dst_pl[2];
static int64_t shape[2];

static void describe(m2n_tensor *t) {
	int m = cfg.src, n = world - cfg.src;
	memset(t, 0, sizeof *t);
	t->name = "w";
	t->dtype = "i32";
	t->ndim = 2;
	shape[0] = cfg.rows;
	shape[1] = cfg.cols;
	t->shape = shape;
	src_shape[0] = m;
	for (int i = 0; i < m; i++)
		src_ranks[i] = i;
	for (int i = 0; i < n; i++)
		dst_ranks[i] = m + i;
	t->src.mesh_ndim = 1;
	t->src.mesh_shape = src_shape;
	t->src.ranks = src_ranks;
	t->src.placements = src_pl;
	t->dst.mesh_shape = dst_shape;
	t->dst.ranks = dst_ranks;
	t->dst.placements = dst_pl;
	t->dst.mesh_ndim = 1;
	dst_shape[0] = n;
	switch (cfg.layout) {
	case 1:
		src_pl[0] = 1;
		if (n % 2 == 0) {
			t->dst.mesh_ndim = 2;
			dst_shape[0] = 2;
			dst_shape[1] = n / 2;
			dst_pl[0] = M2N_REPLICATE;
			dst_pl[1] = 0;
		} else {
			dst_pl[0] = 0;
		}
		break;
	case 2:
		src_pl[0] = M2N_REPLICATE;
		dst_pl[0] = 0;
		break;
	case 3:
		src_pl[0] = 0;
		dst_pl[0] = M2N_REPLICATE;
		break;
	default:
		src_pl[0] = 0;
		dst_pl[0] = 1;
	}
}

static int32_t value(int call, int64_t step, int64_t idx) {
	return (int32_t)((call + 1) * 10000000 + (step % 50) * 200000 + idx);
}

/* One call's state on this rank: its handle, buffers, and the steps that
 * completed (the number of the next step is ok + 1 on every rank). */
struct call {
	m2n_call h;
	int side; /* M2N_SRC or M2N_DST */
	int64_t lshape[2], loff[2], bytes;
	int32_t *buf;
	int ok, mismatch;
};

static struct call calls[MAXCALLS];
static m2n_tensor tensor;

static void fill(struct call *c, int k) {
	for (int64_t i = 0; i < c->lshape[0]; i++)
		for (int64_t j = 0; j < c->lshape[1]; j++)
			c->buf[i * c->lshape[1] + j] =
			    c->side == M2N_SRC ? value(k, c->ok + 1, (c->loff[0] + i) * cfg.cols + c->loff[1] + j) : -1;
}

/* run runs one step of call k from thread th and checks its outcome. */
static void run(int k, int th) {
	struct call *c = &calls[k];
	char msg[4096], detail[4096];
	fill(c, k);
	if (cfg.jitter > 0) {
		pthread_mutex_lock(&outmu);
		long us = rand_r(&cfg.seed) % (cfg.jitter + 1);
		pthread_mutex_unlock(&outmu);
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
	m2n_tensor_buffers b;
	memset(&b, 0, sizeof b);
	m2n_buffer *mine = c->side == M2N_SRC ? &b.src : &b.dst;
	mine->data = c->buf;
	mine->bytes = c->bytes;
	mine->memory = M2N_MEMORY_HOST;
	mine->dtype = "int32";
	m2n_report rep;
	int rc = m2n_call_run(c->h, &b, 1, 0, &rep, NULL);
	int64_t step = c->ok + 1;
	pthread_mutex_lock(&outmu);
	printf("run rank=%d thread=%d call=%d step=%lld rc=%d msg=%s\n", rank, th, k, (long long)step, rc,
	       rc == M2N_OK ? "" : last(msg, sizeof msg));
	fflush(stdout);
	pthread_mutex_unlock(&outmu);
	int64_t wrong = 0, other = 0, untouched = 0, n = c->lshape[0] * c->lshape[1];
	int64_t first = -1;
	if (c->side == M2N_DST)
		for (int64_t i = 0; i < c->lshape[0]; i++)
			for (int64_t j = 0; j < c->lshape[1]; j++) {
				int32_t got = c->buf[i * c->lshape[1] + j];
				int64_t idx = (c->loff[0] + i) * cfg.cols + c->loff[1] + j;
				if (got == -1) {
					untouched++;
					continue;
				}
				if (got != value(k, step, idx)) {
					wrong++;
					if (first < 0)
						first = idx;
					if (got / 10000000 != k + 1 && got % 200000 == idx)
						other++;
				}
			}
	switch (rc) {
	case M2N_OK:
		c->ok++;
		if (rep.completed != 1)
			FAIL("call %c step %lld: M2N_OK with %lld tensors completed", 'a' + k, (long long)step,
			     (long long)rep.completed);
		if (c->side == M2N_DST && (wrong || untouched))
			FAIL("call %c step %lld: M2N_OK, but %lld of %lld elements wrong (%lld hold another call's data, %lld "
			     "untouched; first wrong at global index %lld)",
			     'a' + k, (long long)step, (long long)wrong, (long long)n, (long long)other, (long long)untouched,
			     (long long)first);
		break;
	case M2N_ERR_CALL_MISMATCH: {
		c->mismatch++;
		last(msg, sizeof msg);
		m2n_last_error_detail(detail, sizeof detail);
		const char *first_call = strstr(msg, "call #");
		if (first_call == NULL || strstr(first_call + 1, "call #") == NULL)
			FAIL("call %c: the mismatch does not name both calls: %s", 'a' + k, msg);
		if (strstr(detail, "\"kind\":\"CallMismatchError\"") == NULL)
			FAIL("call %c: mismatch detail %s", 'a' + k, detail);
		if (c->side == M2N_DST && untouched != n)
			FAIL("call %c step %lld: mismatch, but %lld of %lld destination elements changed (%lld hold another "
			     "call's data)",
			     'a' + k, (long long)step, (long long)(n - untouched), (long long)n, (long long)other);
		break;
	}
	default:
		FAIL("call %c step %lld: rc %d, want M2N_OK or M2N_ERR_CALL_MISMATCH: %s", 'a' + k, (long long)step, rc,
		     last(msg, sizeof msg));
	}
}

static void *thread_main(void *arg) {
	int k = (int)(intptr_t)arg;
	for (int i = 0; i < cfg.steps; i++)
		run(k, k);
	return NULL;
}

int main(int argc, char **argv) {
	parse(argc, argv);
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	cfg.seed = cfg.seed * 2654435761u + (unsigned)rank;
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	if (world < 2 || world > MAXRANKS) {
		fprintf(stderr, "calls: %d ranks: want 2 to %d\n", world, MAXRANKS);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (cfg.src < 1 || cfg.src >= world)
		cfg.src = world / 2;
	char msg[4096];

	m2n_options opts;
	m2n_options_init(&opts);
	opts.timeout_seconds = cfg.timeout;
	opts.verify = cfg.verify;
	opts.atomic = cfg.atomic;
	opts.stripe = cfg.stripe;
	opts.coalesce_bytes = cfg.coalesce;
	opts.chunk_bytes = cfg.chunk;
	opts.dst_domain_size = cfg.dstdom;
	if (rank == cfg.badrank)
		opts.timeout_seconds = strtod(cfg.badvalue, NULL);
	m2n_session s = 0;
	int rc = m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), &opts, &s);
	if (cfg.badrank >= 0) {
		/* capi_test.go checks what every rank says (each rank's join
		 * fails alike, naming the bad rank and the field, or succeeds) */
		m2n_last_error_detail(msg, sizeof msg);
		printf("join rank=%d rc=%d detail=%s\n", rank, rc, rc == M2N_OK ? "{}" : msg);
		fflush(stdout);
		if (rc != M2N_OK) {
			MPI_Barrier(MPI_COMM_WORLD);
			if (rank == 0)
				printf("calls: passed\n");
			MPI_Finalize();
			return 0;
		}
	}
	if (rc != M2N_OK) {
		fprintf(stderr, "calls: rank %d: join: %s\n", rank, last(msg, sizeof msg));
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	describe(&tensor);
	for (int k = 0; k < cfg.calls; k++) {
		struct call *c = &calls[k];
		rc = m2n_call_prepare(s, &tensor, 1, cfg.route, &c->h);
		if (rc != M2N_OK) {
			fprintf(stderr, "calls: rank %d: prepare %c: %s\n", rank, 'a' + k, last(msg, sizeof msg));
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		int32_t held = 0;
		c->side = rank < cfg.src ? M2N_SRC : M2N_DST;
		m2n_tensor_part(&tensor, c->side, rank, &held, c->lshape, c->loff, &c->bytes);
		c->buf = malloc(c->bytes > 0 ? c->bytes : 1);
	}

	if (cfg.threads > 1) {
		pthread_t th[MAXCALLS];
		for (int k = 0; k < cfg.threads; k++)
			pthread_create(&th[k], NULL, thread_main, (void *)(intptr_t)k);
		for (int k = 0; k < cfg.threads; k++)
			pthread_join(th[k], NULL);
	} else {
		const char *order = cfg.norders == 0 ? "ab" : cfg.order[rank < cfg.norders ? rank : cfg.norders - 1];
		for (const char *p = order; *p; p++) {
			int k = *p - 'a';
			if (k < 0 || k >= cfg.calls) {
				FAIL("order %s: call %c was not prepared", order, *p);
				continue;
			}
			run(k, 0);
		}
	}

	/* a matched step completes on every rank: every rank counts the same
	 * completed steps of every call. */
	int ok[MAXCALLS] = {0}, every[MAXRANKS * MAXCALLS];
	int oks = 0, mismatches = 0;
	for (int k = 0; k < cfg.calls; k++) {
		ok[k] = calls[k].ok;
		oks += calls[k].ok;
		mismatches += calls[k].mismatch;
	}
	MPI_Allgather(ok, MAXCALLS, MPI_INT, every, MAXCALLS, MPI_INT, MPI_COMM_WORLD);
	for (int r = 0; r < world; r++)
		for (int k = 0; k < cfg.calls; k++)
			if (every[r * MAXCALLS + k] != ok[k])
				FAIL("call %c completed %d steps here, %d on rank %d", 'a' + k, ok[k], every[r * MAXCALLS + k], r);
	printf("summary rank=%d ok=%d mismatch=%d\n", rank, oks, mismatches);
	fflush(stdout);

	for (int k = 0; k < cfg.calls; k++) {
		if (m2n_call_close(calls[k].h) != M2N_OK)
			FAIL("close %c: %s", 'a' + k, last(msg, sizeof msg));
		free(calls[k].buf);
	}
	if (m2n_session_close(s) != M2N_OK)
		FAIL("session close: %s", last(msg, sizeof msg));
	int all;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("calls: %s\n", all ? "FAILED" : "passed");
	MPI_Finalize();
	return all ? 1 : 0;
}
