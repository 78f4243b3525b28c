/* lora_fp8.c: a LoRA merge into FP8 weights through m2n.h (mpirun -np 3):
 * the model of config argv[1] (a small Llama) from a Megatron tp=2 trainer
 * (ranks 0-1) to a vLLM tp=1 generator (rank 2) serving FP8 with argv[2]'s
 * scales (fp8=row, ...), synced in full once; then m2n_model_lora(8, alpha
 * 16) and two adapter steps, each merged on every rank with
 * m2n_model_merge_lora_scales. The generator rank writes what it holds
 * into directory argv[3] for the Go test (TestCLoRAFP8) to check every
 * byte and scale against a dense reference:
 *   model.json, adapters.json        m2n_model_describe of each
 *   base/dst/NAME, base/scale/NAME   the weights and scales of the full sync
 *   stepK/adapter/NAME               the adapters' destination buffers
 *   stepK/dst/NAME, stepK/scale/NAME the weights and scales after merge K
 * Sources are bf16 values of about 0.1 from a hash of the buffer's name,
 * the element's index and the step. Before the first merge the generator
 * checks refusals that write nothing: m2n_model_merge_lora (no scales) on
 * FP8 weights, a scale buffer of another size, a scale name the model
 * lacks: M2N_ERR_INVALID, naming the cause. */
#include <errno.h>
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "m2n.h"

static int failures, rank = -1;

#define PROG "lora_fp8"
#include "check.h"

#define MAXBUF 256

/* One buffer of a model's side, as m2n_model_describe lists it. */
struct buf {
	char name[160], dtype[16];
	int64_t bytes;
	void *data;
};

struct side {
	int n;
	struct buf b[MAXBUF];
};

/* describe returns m's JSON (malloc'd). */
static char *describe(m2n_model m) {
	size_t need = 0;
	m2n_model_describe(m, NULL, 0, &need);
	char *js = malloc(need + 1);
	CHECK(js != NULL && m2n_model_describe(m, js, need + 1, &need) == M2N_OK, "describe: %s", last());
	return js;
}

/* skip_string returns the character after the JSON string at p (at its
 * opening quote). */
static const char *skip_string(const char *p) {
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && p[1])
			p++;
	return *p ? p + 1 : p;
}

/* parse_side reads the buffers of list key ("src", "dst", "scale") of a
 * describe JSON: each object's "name", "bytes" and "dtype" (scale
 * tensors have none: f32), at the object's own level. */
static void parse_side(const char *js, const char *key, struct side *out) {
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	out->n = 0;
	const char *p = strstr(js, pat);
	CHECK(p != NULL, "describe lacks %s", pat);
	if (p == NULL)
		return;
	p += strlen(pat);
	if (*p != '[')
		return; /* null: no buffers */
	int depth = 0; /* of [ and { inside the list */
	struct buf *cur = NULL;
	for (p++; *p; p++) {
		if (*p == '"') {
			const char *end = skip_string(p);
			if (depth == 1 && cur != NULL && *end == ':') {
				size_t klen = (size_t)(end - p - 2);
				const char *v = end + 1;
				if (klen == 4 && strncmp(p + 1, "name", 4) == 0 && *v == '"') {
					const char *ve = skip_string(v);
					snprintf(cur->name, sizeof cur->name, "%.*s", (int)(ve - v - 2), v + 1);
				} else if (klen == 5 && strncmp(p + 1, "dtype", 5) == 0 && *v == '"') {
					const char *ve = skip_string(v);
					snprintf(cur->dtype, sizeof cur->dtype, "%.*s", (int)(ve - v - 2), v + 1);
				} else if (klen == 5 && strncmp(p + 1, "bytes", 5) == 0) {
					cur->bytes = strtoll(v, NULL, 10);
				}
			}
			p = end - 1;
		} else if (*p == '{' || *p == '[') {
			if (depth++ == 0 && *p == '{') {
				CHECK(out->n < MAXBUF, "more than %d buffers", MAXBUF);
				if (out->n >= MAXBUF)
					return;
				cur = &out->b[out->n++];
				memset(cur, 0, sizeof *cur);
				strcpy(cur->dtype, "f32");
			}
		} else if (*p == '}' || *p == ']') {
			if (depth-- == 0)
				return;
		}
	}
}

static void allocate(struct side *s, int fill) {
	for (int i = 0; i < s->n; i++) {
		s->b[i].data = malloc(s->b[i].bytes > 0 ? (size_t)s->b[i].bytes : 1);
		memset(s->b[i].data, fill, (size_t)s->b[i].bytes);
	}
}

static m2n_named_buffer *named(const struct side *s) {
	m2n_named_buffer *nb = calloc((size_t)s->n + 1, sizeof *nb);
	for (int i = 0; i < s->n; i++) {
		nb[i].name = s->b[i].name;
		nb[i].buffer = (m2n_buffer){.data = s->b[i].data, .bytes = s->b[i].bytes, .memory = M2N_MEMORY_HOST};
	}
	return nb;
}

static uint32_t hash(const char *s) {
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* fill_bf16 writes bf16 values in [-0.125, 0.125] into every bf16 buffer
 * of s, from its name, the element's index and step. */
static void fill_bf16(struct side *s, int step) {
	for (int i = 0; i < s->n; i++) {
		CHECK(strcmp(s->b[i].dtype, "bf16") == 0, "source %s is %s, not bf16", s->b[i].name, s->b[i].dtype);
		uint16_t *u = s->b[i].data;
		uint32_t h = hash(s->b[i].name) + (uint32_t)step * 104729u;
		for (int64_t k = 0; k < s->b[i].bytes / 2; k++) {
			uint32_t x = (h + (uint32_t)k * 2654435761u) ^ (uint32_t)k >> 3;
			x ^= x >> 15;
			x *= 0x2C1B3C6Du;
			x ^= x >> 12;
			float f = ((float)(x % 2001) - 1000.0f) / 8000.0f;
			uint32_t bits;
			memcpy(&bits, &f, 4);
			u[k] = (uint16_t)(bits >> 16);
		}
	}
}

static void mkdirs(const char *dir, const char *phase, const char *kind) {
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", dir, phase);
	CHECK(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
	snprintf(path, sizeof path, "%s/%s/%s", dir, phase, kind);
	CHECK(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
}

static void write_file(const char *path, const void *data, size_t n) {
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL && fwrite(data, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
}

/* dump writes every buffer of s into dir/phase/kind/NAME. */
static void dump(const char *dir, const char *phase, const char *kind, const struct side *s) {
	mkdirs(dir, phase, kind);
	for (int i = 0; i < s->n; i++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s/%s/%s", dir, phase, kind, s->b[i].name);
		write_file(path, s->b[i].data, (size_t)s->b[i].bytes);
	}
}

static void run(m2n_model m, struct side *src, struct side *dst, struct side *scale, const char *what) {
	m2n_named_buffer *ns = named(src), *nd = named(dst), *nc = named(scale);
	m2n_report rep;
	int rc = m2n_model_run(m, ns, src->n, nd, dst->n, nc, scale->n, 0, &rep);
	CHECK(rc == M2N_OK && rep.failed == 0, "%s: rc %d, %lld failed: %s", what, rc, (long long)rep.failed, last());
	free(ns);
	free(nd);
	free(nc);
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: lora_fp8 CONFIG FP8MODE OUTDIR\n");
		return 2;
	}
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	const char *dir = argv[3];
	char load[64];
	snprintf(load, sizeof load, "fp8=%s", argv[2]);
	m2n_session s;
	m2n_model m, ad;
	CHECK(m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &s) == M2N_OK, "join: %s", last());
	CHECK(m2n_model_prepare(s, argv[1], "tp=2", "tp=1", load, "hier", &m) == M2N_OK, "prepare: %s", last());
	if (failures) {
		fprintf(stderr, "lora_fp8: rank %d: failed\n", rank);
		m2n_abort_job(1);
	}
	static struct side src, dst, scale, asrc, adst, none;
	char *js = describe(m);
	parse_side(js, "src", &src);
	parse_side(js, "dst", &dst);
	parse_side(js, "scale", &scale);
	allocate(&src, 0);
	allocate(&dst, 0xAA);
	allocate(&scale, 0xFF);
	fill_bf16(&src, 0);
	run(m, &src, &dst, &scale, "full sync");
	int gen = rank == 2;
	if (gen) {
		CHECK(scale.n > 0 && dst.n > 0, "generator holds %d buffers and %d scale tensors", dst.n, scale.n);
		write_file(strcat(strcpy(malloc(strlen(dir) + 16), dir), "/model.json"), js, strlen(js));
		dump(dir, "base", "dst", &dst);
		dump(dir, "base", "scale", &scale);
	}
	CHECK(m2n_model_lora(m, 8, 16.0, NULL, "hier", &ad) == M2N_OK, "lora: %s", last());
	char *ajs = describe(ad);
	parse_side(ajs, "src", &asrc);
	parse_side(ajs, "dst", &adst);
	allocate(&asrc, 0);
	allocate(&adst, 0x55);
	if (gen)
		write_file(strcat(strcpy(malloc(strlen(dir) + 16), dir), "/adapters.json"), ajs, strlen(ajs));
	m2n_named_buffer *nd = named(&dst), *nc = named(&scale), *na = named(&adst);
	for (int step = 1; step <= 2; step++) {
		fill_bf16(&asrc, step);
		run(ad, &asrc, &adst, &none, "adapter step");
		if (gen && step == 1) {
			/* refusals, before any byte is written */
			int rc = m2n_model_merge_lora(m, ad, nd, dst.n, na, adst.n);
			CHECK(rc == M2N_ERR_INVALID && strstr(last(), "m2n_model_merge_lora_scales") != NULL,
			      "merge of FP8 weights without scales: rc %d: %s", rc, last());
			int64_t keep = nc[0].buffer.bytes;
			nc[0].buffer.bytes = keep - 4;
			rc = m2n_model_merge_lora_scales(m, ad, nd, dst.n, nc, scale.n, na, adst.n);
			CHECK(rc == M2N_ERR_INVALID && strstr(last(), "has another size") != NULL && strstr(last(), "scale") != NULL,
			      "a scale buffer 4 bytes short: rc %d: %s", rc, last());
			nc[0].buffer.bytes = keep;
			const char *name = nc[0].name;
			nc[0].name = "no.such.weight_scale_inv";
			rc = m2n_model_merge_lora_scales(m, ad, nd, dst.n, nc, scale.n, na, adst.n);
			CHECK(rc == M2N_ERR_INVALID && strstr(last(), "no.such.weight_scale_inv") != NULL,
			      "an unknown scale tensor: rc %d: %s", rc, last());
			nc[0].name = name;
		}
		int rc = m2n_model_merge_lora_scales(m, ad, nd, dst.n, nc, scale.n, na, adst.n);
		CHECK(rc == M2N_OK, "merge %d: rc %d: %s", step, rc, last());
		if (gen) {
			char phase[16];
			snprintf(phase, sizeof phase, "step%d", step);
			dump(dir, phase, "adapter", &adst);
			dump(dir, phase, "dst", &dst);
			dump(dir, phase, "scale", &scale);
		}
	}
	CHECK(m2n_model_close(ad) == M2N_OK && m2n_model_close(m) == M2N_OK, "close: %s", last());
	CHECK(m2n_session_close(s) == M2N_OK, "session close: %s", last());
	int all = 0;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && all == 0)
		printf("lora_fp8: passed\n");
	MPI_Finalize();
	return all != 0;
}
