/*
 * m2n.h: the C interface of m2n, which reshards distributed tensors between
 * process groups (RL weight sync: M trainer ranks hand a tensor, or a whole
 * model, to N generator ranks that want another layout), with exact PyTorch
 * DTensor layouts. Build the library with `make capi` (dist/libm2n.so and
 * dist/m2n.h); link with -lm2n. The library links libmpi.so.40 (OpenMPI) and
 * opens libcuda and NCCL at run time, only for CUDA sessions.
 *
 * A program joins a session once on an MPI communicator it owns, prepares a
 * call once (validate, plan, schedule, agree across ranks), and runs it
 * every step with that step's local buffers:
 *
 *     m2n_session s;
 *     m2n_call c;
 *     if (m2n_session_join(MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &s) != M2N_OK) ...
 *     if (m2n_call_prepare(s, tensors, n, "hier", &c) != M2N_OK) ...
 *     for (step = 0; step < steps; step++)
 *         if (m2n_call_run(c, buffers, n, 0, &report, NULL) != M2N_OK) ...
 *     m2n_call_close(c);
 *     m2n_session_close(s);
 *
 * MPI: the library never initialises or finalises MPI. The program (or
 * mpi4py) initialises it first, with MPI_THREAD_MULTIPLE, and passes
 * communicators by their Fortran handle (MPI_Comm_c2f; mpi4py's
 * Comm.py2f()). Every rank of the communicator makes the same calls in the
 * same order (SPMD), as with MPI collectives.
 *
 * Errors: every function returns M2N_OK or an M2N_ERR_* code. Errors the
 * ranks agreed on (M2N_ERR_VALIDATION, M2N_ERR_AGREEMENT, M2N_ERR_CHECKSUM)
 * come back on every rank alike and leave the session usable; a rank whose
 * own inputs are bad fails every rank at once, naming itself, instead of
 * making the others wait. M2N_ERR_TIMEOUT and M2N_ERR_ABORT mean the
 * session aborted: close it, and end the job with m2n_abort_job rather than
 * MPI_Finalize, which would wait for peers that are gone. The message of the
 * failed call (naming the rank, the tensor and the field, as the Go errors
 * do) is kept per thread: m2n_last_error.
 *
 * Handles are integers into the library's tables (0 is never a handle);
 * no pointer into the library's memory is ever handed out, and pointers
 * passed in are only read or written during the call. A handle may be used
 * from any thread; calls on one session (and its calls and models) are
 * serialised by the library, in whatever order the threads arrive on each
 * rank: a step whose call (or step number) differs between ranks returns
 * M2N_ERR_CALL_MISMATCH on every rank, naming both calls, before a byte
 * moves, and never delivers another call's data. Threads that must run
 * concurrently get sessions of their own (one communicator each).
 *
 * Stability: functions and types here keep their meaning; new ones get new
 * names. m2n_options carries its size, so fields may be added at its end.
 */
#ifndef M2N_H
#define M2N_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface version this header describes; m2n_abi_version returns the
 * library's. 2 added M2N_ERR_CALL_MISMATCH, M2N_ERR_LEFT,
 * m2n_session_leave and m2n_session_refuse; 3 delta mode:
 * m2n_options.delta, m2n_delta_report, m2n_call_resync,
 * m2n_call_delta_report, m2n_model_resync and m2n_model_delta_report; 4
 * LoRA: m2n_model_lora and m2n_model_merge_lora; 5
 * m2n_model_merge_lora_scales (merging into FP8 weights). */
#define M2N_ABI_VERSION 5

/* Result codes. */
enum {
	M2N_OK = 0,
	/* A bad argument found on this rank alone, before any collective: a
	 * null pointer, an unknown or closed handle, a struct of another size,
	 * MPI not initialised. Other ranks are not told, except that running a
	 * call or model this rank closed while its session is open leaves the
	 * session, which they are (m2n_call_close). */
	M2N_ERR_INVALID = 1,
	/* Inputs that cannot work (a bad shape, placement, dtype, buffer or
	 * view), agreed by every rank: each returns the lowest failing rank's
	 * error (Go's reshard.ValidationError, wrapping a BufferError,
	 * FieldError or ViewError). The session stays usable. */
	M2N_ERR_VALIDATION = 2,
	/* Ranks were given different inputs (a layout, an option, a route):
	 * reshard.AgreementError, naming the first rank and field that differ.
	 * The session stays usable. */
	M2N_ERR_AGREEMENT = 3,
	/* With verify, a message arrived with another CRC-32C than it was sent
	 * with (reshard.ChecksumError). */
	M2N_ERR_CHECKSUM = 4,
	/* A rank waited past the timeout (reshard.TimeoutError, naming the
	 * ranks it waited for): the session aborted. */
	M2N_ERR_TIMEOUT = 5,
	/* A rank gave up (a transport failure, a peer's notice): the session
	 * aborted (reshard.AbortError, naming that rank and why). */
	M2N_ERR_ABORT = 6,
	/* A CUDA session where there is no CUDA driver, GPU or NCCL. */
	M2N_ERR_UNAVAILABLE = 7,
	/* Anything else: an MPI, CUDA or NCCL failure, a file that cannot be
	 * read. */
	M2N_ERR_OTHER = 8,
	/* A bug in m2n, caught at the boundary (a Go panic); the message says
	 * where. */
	M2N_ERR_INTERNAL = 9,
	/* Ranks ran different calls of the session at once, or different steps
	 * of one call (a rank that ran call a where another ran call b, or two
	 * threads whose calls interleave differently on two ranks): every rank
	 * returns it, naming the first rank that differs, the call and step it
	 * began, and the call and step rank 0 began (Go's
	 * refit.CallMismatchError), before a byte moves: no destination
	 * changed, no step was counted, and the session stays usable. Detail:
	 * "call", "step", "want", "want_step", "differing". */
	M2N_ERR_CALL_MISMATCH = 10,
	/* A peer left the session (m2n_session_close, or m2n_session_leave after
	 * a failure of its own program) before a collective this rank waits
	 * in, which it will never join (control.LeftError, naming it and why):
	 * the session aborted, as with M2N_ERR_ABORT. Detail: "rank" (the rank
	 * that left), "cause", "phase". */
	M2N_ERR_LEFT = 11
};

/* Handles. 0 is never a handle. */
typedef uint64_t m2n_session;
typedef uint64_t m2n_call;
typedef uint64_t m2n_model;

/* Devices. */
enum {
	M2N_DEVICE_CPU = 0,  /* host memory, moved with MPI */
	M2N_DEVICE_CUDA = 1  /* one GPU per rank, moved with NCCL */
};

/* m2n_options.cuda_device: the GPU whose ordinal is the rank's local rank
 * on its host. */
#define M2N_CUDA_DEVICE_LOCAL_RANK (-1)

/* Session options. Start from m2n_options_init; every rank must pass equal
 * options (m2n_session_join checks), except cuda_device. */
typedef struct m2n_options {
	uint32_t struct_size;   /* sizeof(m2n_options), as m2n_options_init sets it; the size of
	                           version 2's (up to emulate_net_bw) is read with delta 0 */
	int32_t device;         /* M2N_DEVICE_CPU (default) or M2N_DEVICE_CUDA */
	int32_t cuda_device;    /* CUDA: this rank's GPU, the current device (cudaGetDevice,
	                           torch.cuda.current_device()); default M2N_CUDA_DEVICE_LOCAL_RANK */
	int32_t verify;         /* nonzero: CRC-32C every message and compare before a step succeeds */
	double timeout_seconds; /* bound on every wait, collectives included; 0: 300 */
	int64_t chunk_bytes;    /* largest message; 0: 16 MiB on CPUs, 64 MiB on GPUs */
	int64_t staging_bytes;  /* staging memory per rank; 0: 256 MiB on CPUs, 1 GiB on GPUs */
	int64_t coalesce_bytes; /* messages up to this size between two ranks travel as one; 0: default, < 0: off */
	int32_t src_domain_size; /* group the source ranks of each call into domains of this many (0: hosts) */
	int32_t dst_domain_size; /* the same for the destination ranks (emulated domains on one host) */
	int32_t atomic;          /* nonzero: destinations change only if every tensor arrived everywhere */
	int32_t stripe;          /* nonzero: spread the sends of a replicated source over its replicas */
	double emulate_net_bw;   /* bytes per second capping cross-domain traffic per rank; 0: off */
	/* nonzero: delta mode, on CPU sessions (a CUDA session's join fails with
	 * M2N_ERR_VALIDATION naming the field delta: it runs on the host, over
	 * host memory). Each step of a call after its first sends only the
	 * elements that changed since the step before: every message encoded
	 * against what its source last sent, per block, dense where that is
	 * smaller, applied in place by the destinations (with atomic, all at
	 * once). The first step, the step after m2n_call_resync and the step
	 * after a failed step that was not atomic are full syncs. Tensors of
	 * 1-, 2- or 4-byte elements that do not convert to FP8, on the flat or
	 * hier route; others fail m2n_call_prepare with M2N_ERR_VALIDATION.
	 * A source keeps a copy of what it last sent: its source parts' bytes
	 * again. m2n_call_delta_report says what a step saved. */
	int32_t delta;
	int32_t reserved;        /* 0 */
} m2n_options;

/* m2n_tensor placements: Replicate(); any value d >= 0 is Shard(d). */
#define M2N_REPLICATE (-1)

/* Sides of a tensor. */
enum {
	M2N_SRC = 0, /* the source (trainer) side */
	M2N_DST = 1  /* the destination (generator) side */
};

/* One side of a tensor: a DTensor device mesh with its ranks and one
 * placement per mesh axis, and where this rank's part sits in its buffer. */
typedef struct m2n_side {
	int32_t mesh_ndim;          /* mesh axes, 1 to 8 */
	const int32_t *mesh_shape;  /* mesh_ndim sizes */
	const int32_t *ranks;       /* the product of mesh_shape session ranks, row-major
	                               (DeviceMesh.mesh.flatten()); any order */
	const int32_t *placements;  /* mesh_ndim entries: M2N_REPLICATE, or d for Shard(d) */
	/* This rank's view into its buffer, in elements (a strided view, as
	 * fused weights are): element (i_0, ..., i_{n-1}) of the part sits at
	 * view_offset + sum i_k * view_strides[k]. NULL view_strides with
	 * view_offset 0: the part is dense, row-major, in a buffer of exactly
	 * its size (the usual case). Otherwise ndim strides, the last 1. */
	int64_t view_offset;
	const int64_t *view_strides;
} m2n_side;

/* m2n_tensor.scale: FP8 in flight. A tensor whose source dtype is bf16 or
 * f32 and whose destination dtype is fp8e4m3 converts while it moves: the
 * destination receives E4M3 bytes, bit for bit those of quantizing the
 * whole tensor at once, and its float32 scales (weight_scale_inv). scale
 * says which elements share a scale, over the last two dims (the matrix;
 * leading dims, such as experts, index separate matrices). */
enum {
	M2N_SCALE_NONE = 0,  /* no conversion */
	M2N_SCALE_BLOCK = 1, /* 128x128 blocks, DeepSeek-V3's format */
	M2N_SCALE_ROW = 2,   /* one scale per row of every matrix */
	M2N_SCALE_TENSOR = 3 /* one scale per matrix */
};

/* A named tensor with both layouts, the same on every rank (the views are
 * each rank's own). */
typedef struct m2n_tensor {
	const char *name;      /* unique in the call */
	const char *dtype;     /* bf16, f16, f32, f64, i8, u8, i32, i64, fp8e4m3, fp8e5m2, or
	                          PyTorch's names: bfloat16, float32, float8_e4m3fn, ... */
	int32_t ndim;          /* 0 to 8 */
	const int64_t *shape;  /* ndim sizes (the global shape) */
	m2n_side src, dst;
	const char *dst_dtype; /* the destination's dtype; NULL: dtype. fp8e4m3 from bf16 or f32
	                          converts in flight (with scale) */
	int32_t scale;         /* M2N_SCALE_*: NONE unless the tensor converts */
	int32_t reserved;      /* 0 */
} m2n_tensor;

/* Where a buffer's memory is. */
enum {
	M2N_MEMORY_NONE = 0, /* no buffer: the rank holds no part on this side */
	M2N_MEMORY_HOST = 1, /* host memory (CPU sessions) */
	M2N_MEMORY_CUDA = 2  /* memory of the session's GPU (CUDA sessions) */
};

/* One local buffer. An empty part (an empty shard) is a buffer of 0 bytes
 * whose data may be NULL, with memory HOST or CUDA. */
typedef struct m2n_buffer {
	void *data;         /* host pointer, or CUDA device pointer */
	int64_t bytes;      /* its size: the part's bytes (or, with a view, at least its extent) */
	int32_t memory;     /* M2N_MEMORY_NONE, HOST or CUDA */
	int32_t reserved;   /* 0 */
	const char *dtype;  /* the buffer's element type, checked against the tensor's; NULL: unchecked */
} m2n_buffer;

/* One tensor's buffers on this rank, in the order of the call's tensors.
 * scale: for a tensor converted to FP8, on its destination ranks, the
 * buffer that receives the rank's scales every step, one little-endian
 * float32 per block its part touches, row-major (m2n_tensor_scale says
 * which); M2N_MEMORY_NONE everywhere else. */
typedef struct m2n_tensor_buffers {
	m2n_buffer src, dst, scale;
} m2n_tensor_buffers;

/* What one run did on this rank. */
typedef struct m2n_report {
	int64_t completed;    /* tensors that reached every destination rank (verified, with verify); for
	                         m2n_model_run, the whole model's, every stage's: the same on every rank */
	int64_t failed;       /* the others */
	double seconds;       /* the run's time on this rank */
	int64_t sent_network; /* bytes sent across domains */
	int64_t sent_local;   /* bytes sent inside this rank's domain */
	int64_t recv_network;
	int64_t recv_local;
	int64_t copied;       /* bytes copied inside this rank */
	int64_t packed;       /* bytes that went through staging */
	int64_t messages;
	int64_t rounds;
} m2n_report;

/* What this rank's sends and copies moved in the last step of a call or
 * model (m2n_call_delta_report), against what they move dense. */
typedef struct m2n_delta_report {
	uint32_t struct_size;  /* sizeof(m2n_delta_report): the caller sets it */
	int32_t delta;         /* 1: a delta step (of a model: on every stage this rank is in); 0: a full
	                          sync, a session not in delta mode, or no step ran */
	int64_t sent_network;  /* bytes sent across domains (encodings, in a delta step): m2n_report's */
	int64_t sent_local;    /* bytes sent inside this rank's domain */
	int64_t copied;        /* bytes copied inside this rank */
	int64_t dense_network; /* what those sends and copies move dense, a full sync's bytes: equal to */
	int64_t dense_local;   /* sent_network, sent_local and copied in a full sync; in a delta step, */
	int64_t dense_copied;  /* dense minus sent is what delta mode saved on this rank */
} m2n_delta_report;

/* A named buffer of a model (m2n_model_run). */
typedef struct m2n_named_buffer {
	const char *name;
	m2n_buffer buffer;
} m2n_named_buffer;

/* Hide the prototypes (the library's own build declares them itself). */
#ifndef M2N_NO_PROTOTYPES

/* M2N_ABI_VERSION of the library. */
int32_t m2n_abi_version(void);

/* The message of the last call on this thread that failed: copies at most
 * len-1 bytes and a NUL into buf (NULL with len 0 only asks) and returns
 * the message's length, so a caller can retry with len = that + 1; 0 when
 * no call on this thread has failed. A successful call leaves it as it is. */
size_t m2n_last_error(char *buf, size_t len);
/* The same error as a JSON object: "code", "kind" (the Go error type:
 * "ValidationError", "AgreementError", ...), "chain" (every m2n error type
 * it wraps, outermost first), "message", and where known "rank", "tensor",
 * "side", "field", "value", "want", "differing", "peers", "phase", "index"
 * (a non-finite element of a tensor converting to FP8). */
size_t m2n_last_error_detail(char *buf, size_t len);
/* The code of the last failed call on this thread (M2N_OK if none). */
int32_t m2n_last_error_code(void);

/* Fills opts with the defaults (and struct_size). */
void m2n_options_init(m2n_options *opts);

/* Joins a session of every rank of the communicator whose Fortran handle
 * is comm (MPI_Comm_c2f, mpi4py's Comm.py2f()); collective over it. opts
 * NULL: the defaults. MPI must be initialised with MPI_THREAD_MULTIPLE.
 * The session duplicates the communicator; the caller keeps its own. */
int m2n_session_join(int32_t comm, const m2n_options *opts, m2n_session *out);
/* Two jobs, one session (README: Two jobs, one session). m2n_session_listen
 * is the trainer's side: every rank of comm calls it; rank 0 publishes an
 * MPI port and a random job token in the file at path (mode 0600, on a
 * path the generator's job can read) and the call waits, at most the
 * timeout, for one generator job to m2n_session_connect through that file.
 * A job presenting a wrong token is refused (both sides learn why) and the
 * wait goes on. The session's ranks are the trainer's first, then the
 * generator's; meshes are given in them. The port file is removed before
 * it returns: call it again for the next generator (a generator that ended
 * between steps makes a step fail with M2N_ERR_TIMEOUT or M2N_ERR_ABORT;
 * m2n_session_close then leaves this job usable). Both jobs' mpiruns need
 * --ompi-server file:URI (OpenMPI 4.1). A wait that runs out (no generator
 * came; the trainer never accepted) fails and the job is failed
 * (m2n_job_failed): MPI cannot cancel it. */
int m2n_session_listen(int32_t comm, const m2n_options *opts, const char *path, m2n_session *out);
/* The generator's side: joins the trainer listening on the port file at
 * path. A missing, stale, busy or shared port file fails at once naming
 * it (M2N_ERR_VALIDATION), as does a refused token. */
int m2n_session_connect(int32_t comm, const m2n_options *opts, const char *path, m2n_session *out);
/* This rank's rank in the session and the number of ranks. */
int m2n_session_rank(m2n_session s, int32_t *rank);
int m2n_session_size(m2n_session s, int32_t *size);
/* Whether the session aborted (M2N_ERR_TIMEOUT or M2N_ERR_ABORT). */
int m2n_session_aborted(m2n_session s, int32_t *aborted);
/* Closes the session and its calls and models (after an abort it frees
 * nothing a peer might touch, and does not return the abort again). Every
 * rank closes its session after its last step; a peer still waiting in, or
 * later entering, a collective this rank never joined fails at once with
 * M2N_ERR_LEFT naming this rank ("closed the session"). */
int m2n_session_close(m2n_session s);
/* Leaves the session after a failure of this rank's own program: closes
 * it as m2n_session_close does, and every peer that waits in, or later
 * enters, a collective this rank never joined fails at once with
 * M2N_ERR_LEFT naming this rank and why (a NUL-terminated reason; NULL:
 * "its program failed"), instead of waiting out the timeout. Not
 * collective; it waits for another thread's call on the session to end
 * first. The job is then failed (m2n_job_failed returns 1), as after an
 * abort: end it with m2n_abort_job rather than waiting in MPI_Finalize for
 * peers that abort. The Python package calls it for every open session on
 * an uncaught exception and at exit. */
int m2n_session_leave(m2n_session s, const char *why);
/* Takes part in m2n_session_join of the other ranks of the communicator
 * (Fortran handle comm) for a rank that cannot join, for a reason only it
 * can tell (an option its program could not read, say): every rank's join
 * fails at once with M2N_ERR_VALIDATION naming this rank and why. Returns
 * that error. */
int m2n_session_refuse(int32_t comm, const char *why);

/* This rank's part of one side of a tensor, as DTensor computes it,
 * without a session: held is 1 if rank is in the side's mesh; shape and
 * offset (ndim entries each, may be NULL) get the local shape and global
 * offset; bytes (may be NULL) the dense part's size. */
int m2n_tensor_part(const m2n_tensor *t, int32_t side, int32_t rank, int32_t *held, int64_t *shape, int64_t *offset,
	int64_t *bytes);

/* The scale blocks rank holds of a tensor converted to FP8 (those its
 * destination part touches): held is 1 if it holds a scale tensor; shape and
 * offset (ndim entries each, may be NULL) get the box of the block grid it
 * holds; bytes (may be NULL) its size, 4 per block. */
int m2n_tensor_scale(const m2n_tensor *t, int32_t rank, int32_t *held, int64_t *shape, int64_t *offset, int64_t *bytes);

/* Prepares a call of n tensors on a route (collective over the session):
 * validates, plans, schedules and agrees once. route is
 * "name[:key=value,...]": "flat", "agbcast", "hier" (NULL: hier), or
 * "auto", with keys balance (hier's leader balance: count or bytes), and
 * for auto net_bw and local_bw (bytes per second per rank; default 50e9 and
 * 900e9) and latency (seconds per message; default 20e-6). */
int m2n_call_prepare(m2n_session s, const m2n_tensor *tensors, int64_t n, const char *route, m2n_call *out);
/* Runs one step (collective over the session): buffers holds this rank's
 * buffers of the call's n tensors, in order. On CUDA sessions the step
 * first waits for the work queued so far on stream (a CUstream or
 * cudaStream_t as an integer, such as torch.cuda.current_stream().cuda_stream),
 * or with stream 0 for all work on the GPU (cuCtxSynchronize); and today
 * the call synchronises before it returns: the destinations are written
 * then, for any stream. CPU sessions ignore stream. report (may be NULL)
 * gets what the run did; completed (may be NULL; n bytes) gets 1 for each
 * tensor that completed and 0 for each that did not. The buffers are
 * checked first, on every rank (a buffer of the wrong size, memory or
 * dtype anywhere is M2N_ERR_VALIDATION on every rank, naming it). */
int m2n_call_run(m2n_call c, const m2n_tensor_buffers *buffers, int64_t n, uintptr_t stream, m2n_report *report,
	uint8_t *completed);
/* Takes part in one step in place of m2n_call_run for a rank whose own
 * inputs are bad in a way only it can tell (a non-contiguous tensor, say):
 * every rank fails at the buffer check with M2N_ERR_VALIDATION and why,
 * naming this rank and, for tensor >= 0, the tensor and side. It returns
 * that error. */
int m2n_call_refuse(m2n_call c, int64_t tensor, int32_t side, const char *why);
/* The number of tensors of the call. */
int m2n_call_tensors(m2n_call c, int64_t *n);
/* The call's schedule as JSON: "route" (as chosen; auto says what it
 * picked), "note", "fingerprint", "rounds", "messages", "tensors". */
int m2n_call_describe(m2n_call c, char *buf, size_t len, size_t *needed);
/* Frees the call's staging. Every rank closes the call (or its session).
 * Running (or refusing) a call this rank closed, while its session is open,
 * returns M2N_ERR_INVALID and leaves the session (m2n_session_leave): the
 * peers waiting in that step fail at once with M2N_ERR_LEFT naming this
 * rank and why, rather than wait out the timeout. */
int m2n_call_close(m2n_call c);
/* Versions. Every step carries a version every rank agrees on as it
 * begins: v from m2n_call_set_version (at least 1, the same on every rank,
 * or the step fails on every rank with M2N_ERR_VALIDATION, nothing moved)
 * or, without it, the last step's plus one. m2n_call_held says what this
 * rank's destination buffers hold: *version, the last step that completed
 * for every tensor on every rank (0: none yet); *verified, 1 if it ran
 * with verify; *intact, 0 once a later step failed after its bytes began
 * to move (never with atomic, which commits all at once). */
int m2n_call_set_version(m2n_call c, uint64_t v);
int m2n_call_held(m2n_call c, uint64_t *version, int32_t *verified, int32_t *intact);
/* Delta mode (m2n_options.delta). m2n_call_resync makes the call's next
 * step a full sync, every element sent dense, as its first step is (after
 * a destination's buffers were changed outside the call, say). Not
 * collective: one rank asking is enough, the ranks agree on it as the
 * step begins. It does nothing for a session not in delta mode.
 * m2n_call_delta_report fills out (struct_size set by the caller) with
 * what the call's last m2n_call_run moved on this rank against what a
 * full sync moves; all zero before the first step, and after a run that
 * failed before a byte moved. */
int m2n_call_resync(m2n_call c);
int m2n_call_delta_report(m2n_call c, m2n_delta_report *out);

/* Prepares a whole model (collective over the session): model is a
 * built-in name (deepseek-v3, qwen3-235b-a22b, llama-3.1-70b), a
 * HuggingFace config.json or a JSON tensor list; trainer a Megatron-Core
 * configuration ("tp=2,pp=2,dp=2,ep=4"), generator a vLLM one
 * ("tp=4,dp=2"); load "scale=N,layers=L,mtp=1,fp8=MODE" (NULL: none)
 * shrinks it, and with fp8 (block, row or tensor) the generator serves FP8
 * weights converted in flight: every bf16 tensor of 2 or 3 dims arrives as
 * fp8e4m3 with its scales.
 * The session must have as many ranks as both together: trainers first,
 * pipeline stage after stage, then the generator. route as for
 * m2n_call_prepare. */
int m2n_model_prepare(m2n_session s, const char *model, const char *trainer, const char *generator, const char *load,
	const char *route, m2n_model *out);
/* The model as JSON: "model", "trainer", "generator", "world", "stages",
 * "tensors", "params", "bytes", this rank's buffers on each side, "src"
 * and "dst": lists of {"name", "stage", "dtype", "elems", "bytes",
 * "tensors", "parts"}, and its scale tensors, "scale": a list of {"name"
 * (the tensor's, with _scale_inv), "tensor", "stage", "bytes", "shape" and
 * "offset" (the box of the tensor's block grid)}. A fused buffer holds several tensors' parts; each
 * part is {"tensor", "shape" (as transformers holds it), "layout_shape"
 * (the row-major reshape both sides shard), "local_shape" and "offset"
 * (this rank's box of the layout shape), "view_offset" and "view_strides"
 * (where the box sits in the buffer, in elements)}. */
int m2n_model_describe(m2n_model m, char *buf, size_t len, size_t *needed);
/* Runs one step of the whole model (collective over the session), every
 * pipeline stage at once: src, dst and scale name this rank's buffers and
 * scale tensors (as m2n_model_describe lists them; each exactly its size;
 * scale may be NULL with nscale 0 for a model without FP8). The buffers are
 * checked first, in one small collective over the whole session: a bad
 * one anywhere is M2N_ERR_VALIDATION on every rank, naming it. stream as
 * for m2n_call_run. The report's completed and failed count the whole
 * model's tensors, every pipeline stage's (the same on every rank: the
 * ranks exchange their stages' counts in one more small collective); its
 * seconds are this rank's slowest stage, its bytes and messages the sums
 * over the stages this rank is in (a trainer rank's own stage; a
 * generator rank's every stage). */
int m2n_model_run(m2n_model m, const m2n_named_buffer *src, int64_t nsrc, const m2n_named_buffer *dst, int64_t ndst,
	const m2n_named_buffer *scale, int64_t nscale, uintptr_t stream, m2n_report *report);
/* m2n_call_refuse for a model step: every rank of the session fails with
 * M2N_ERR_VALIDATION and why, naming this rank. */
int m2n_model_refuse(m2n_model m, const char *why);
int m2n_model_close(m2n_model m);
/* m2n_call_set_version and m2n_call_held for every stage of a model this
 * rank is in (held: the lowest version, verified and intact where every
 * stage's is). */
int m2n_model_set_version(m2n_model m, uint64_t v);
int m2n_model_held(m2n_model m, uint64_t *version, int32_t *verified, int32_t *intact);
/* m2n_call_resync and m2n_call_delta_report for every stage of a model
 * this rank is in: a generator rank is in every stage, so its resync
 * makes the whole model's next step a full sync, a trainer rank's its own
 * stage's. The report sums the stages' bytes, as m2n_model_run's does;
 * delta is 1 where every stage's step was a delta step. */
int m2n_model_resync(m2n_model m);
int m2n_model_delta_report(m2n_model m, m2n_delta_report *out);
/* LoRA. m2n_model_lora prepares the LoRA adapters of model base (every
 * rank calls it, as m2n_model_prepare): an A [rank, in] and a B [out, rank]
 * for every dense projection named in targets (comma-separated
 * transformers module names; NULL or "" for q_proj, k_proj, v_proj,
 * o_proj, gate_proj, up_proj, down_proj), held as Megatron-Bridge's
 * CanonicalLoRA trains them and as vLLM's LoRA layers hold them, laid out
 * on base's trainer and generator and prepared on route as a model of
 * their own: m2n_model_describe lists their buffers, m2n_model_run moves
 * them. alpha 0 is alpha = rank; merging scales B @ A by alpha / rank.
 * A base whose generator holds FP8 is refused (M2N_ERR_VALIDATION) where
 * a generator rank's part of an adapted weight cuts a scale block; else
 * m2n_model_merge_lora_scales merges into its FP8 weights.
 *
 * m2n_model_merge_lora merges what this rank's destination buffers of
 * adapters (adapter_dst, as given to its last m2n_model_run) hold into this
 * rank's destination buffers of base (dst), in place: each weight part
 * gains its part of (alpha / rank) (B @ A) less the previous merge's
 * product, so the buffers hold the weights the adapters were trained on
 * plus the latest adapters (one float32 sum per element, rounded once to
 * bf16). Call it on every generator rank after each adapter step that
 * completed; it is local to the rank (no collective), and trainer ranks
 * have nothing to merge. On GPU sessions it runs on host copies. A buffer
 * that is not one of this rank's (see m2n_model_describe), is given twice
 * or has another size is M2N_ERR_INVALID, naming it, and so is a rank that
 * holds FP8 weights of base: merge those with m2n_model_merge_lora_scales.
 *
 * m2n_model_merge_lora_scales is m2n_model_merge_lora with scale: this
 * rank's scale tensors of base (as m2n_model_describe lists them and
 * m2n_model_run takes them: little-endian float32, each exactly its size;
 * NULL with nscale 0 for a model without FP8), for a base whose generator
 * holds FP8 (m2n_model_prepare's fp8=MODE). Each adapted fp8e4m3 weight
 * part in dst, and its scales in scale, are rewritten in place as
 *
 *     W = Q(D(Wq0) + (alpha / rank) (B @ A))
 *
 * from a base Wq0, the FP8 bytes and scales the part held at the first
 * merge with this adapters model (what the last full sync delivered; the
 * library keeps a copy, 1 byte an element and 4 a block): D decodes each
 * byte times its block's scale in float32, the product is added as for
 * bf16 (k in order, each product rounded to float32), and Q re-quantizes
 * every block the part holds with the in-flight conversion's rule (the
 * block's amax, its scale amax x float32(1/448), each element divided by
 * it and rounded to E4M3), so a step's weight depends only on the base and
 * the latest adapters. An adapted FP8 weight whose scales are not given is
 * an error naming it. bf16 and f32 weights merge as m2n_model_merge_lora
 * merges them. */
int m2n_model_lora(m2n_model base, int64_t rank, double alpha, const char *targets, const char *route, m2n_model *out);
int m2n_model_merge_lora(m2n_model base, m2n_model adapters, const m2n_named_buffer *dst, int64_t ndst,
                         const m2n_named_buffer *adapter_dst, int64_t nadapter);
int m2n_model_merge_lora_scales(m2n_model base, m2n_model adapters, const m2n_named_buffer *dst, int64_t ndst,
                                const m2n_named_buffer *scale, int64_t nscale, const m2n_named_buffer *adapter_dst,
                                int64_t nadapter);

/* Whether a session of this process aborted, so that MPI_Finalize would
 * wait for peers that are gone. */
int32_t m2n_job_failed(void);
/* Ends the job after a short grace period (so peers can report their own
 * errors): MPI_Abort on MPI_COMM_WORLD with code. It does not return. */
void m2n_abort_job(int32_t code);

#endif /* M2N_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif

#endif /* M2N_H */
