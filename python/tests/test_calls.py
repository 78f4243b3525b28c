"""Calls from Python with numpy (mpirun -np 6): eight tensors of different
layouts and dtypes from 2 trainer ranks to a DP2 x TP2 generator (explicit
rank orders, meshes sharing ranks, an uneven split with an empty shard, a
0-dim tensor), on every route, two steps each, every element of every
destination checked; then the errors: a bad buffer on one rank (dtype,
contiguity, size, name) raises the same ValidationError on every rank,
naming that rank, the tensor and the side, and leaves the session usable; a
rank with another layout raises AgreementError on every rank, naming it and
the field; a layout only one rank gets wrong raises ValidationError on every
rank, naming it; versions count up, are set, agreed and held."""

import numpy as np

from harness import box, case, check, comm, expect, fail, finish, m2n, pattern, rank, raw

assert comm.size == 6, "run with mpirun -np 6"

S, R = m2n.Shard, m2n.Replicate
trainer = m2n.Mesh(range(0, 2))
generator = m2n.Mesh([[2, 3], [4, 5]])  # DP2 x TP2
NUMPY = {"bfloat16": np.uint16, "float32": np.float32, "float16": np.float16, "int64": np.int64, "int8": np.int8,
         "float64": np.float64, "float8_e4m3fn": np.uint8}


def tensors(o_proj=None, bad=None):
    return [
        m2n.Tensor("embed", (40, 16), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [R(), S(0)])),
        m2n.Tensor("o_proj", (16, 24), "float32", src=(trainer, [S(1)]), dst=(generator, o_proj or [R(), S(1)])),
        m2n.Tensor("norm", (16,), "float16", src=(trainer, [R()]), dst=(generator, [R(), R()])),
        m2n.Tensor("experts", (4, 6, 10), "int64", src=(trainer, [S(0)]),
                   dst=(m2n.Mesh([[5, 3], [4, 2]]), [S(2), S(0)])),
        m2n.Tensor("uneven", (3, 8), "int8", src=(m2n.Mesh([0]), [R()]), dst=(m2n.Mesh(range(2, 6)), [S(0)])),
        m2n.Tensor("scalar", (), "float64", src=(trainer, [R()]), dst=(generator, ["R", "R"])),
        m2n.Tensor("shared", (12, 6), "float8_e4m3fn", src=(m2n.Mesh([0, 1, 2]), [S(0)]),
                   dst=(m2n.Mesh(range(1, 5), shape=(2, 2)), [S(1), S(0)])),
        m2n.Tensor("double", (10, 4), "float32", src=(trainer, [bad or S(0)]), dst=(generator, [S(0), S(0)])),
    ]


def itemsize(t):
    return np.dtype(NUMPY[t.dtype]).itemsize


def sources(ts, step):
    out = {}
    for i, t in enumerate(ts):
        p = t.part("src", rank)
        if p is not None:
            g = pattern(t.shape, itemsize(t), i, step)
            out[t.name] = np.ascontiguousarray(box(g, p[1], p[0])).view(NUMPY[t.dtype])
    return out


def destinations(ts):
    out = {}
    for t in ts:
        shape = t.local_shape("dst", rank)
        if shape is not None:
            out[t.name] = np.full(shape, 0xAA, dtype=np.uint8 if itemsize(t) == 1 else _uint(t)).view(NUMPY[t.dtype])
    return out


def _uint(t):
    return {2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize(t)]


def verify(ts, dst, step):
    for i, t in enumerate(ts):
        p = t.part("dst", rank)
        if p is None:
            check(t.name not in dst, "tensor %s: a destination where the rank holds none" % t.name)
            continue
        want = box(pattern(t.shape, itemsize(t), i, step), p[1], p[0])
        got = raw(dst[t.name])
        if got.shape != want.shape:
            fail("tensor %s: local shape %s, want %s" % (t.name, got.shape, want.shape))
            continue
        bad = np.argwhere(got != want)
        if len(bad):
            k = tuple(bad[0])
            fail("tensor %s step %d: %d of %d elements wrong; first at local %s: got %#x, want %#x" %
                 (t.name, step, len(bad), got.size, k, int(got[k]), int(want[k])))


ts = tensors()
names = [t.name for t in ts]
s = m2n.Session(comm, timeout=60, dst_domain_size=2)
check((s.rank, s.size) == (rank, 6), "session rank %d of %d" % (s.rank, s.size))


@case("the local parts follow DTensor (uneven chunks, an empty shard, a 0-dim tensor)")
def _():
    u = ts[4]
    want = {2: ((1, 8), (0, 0)), 3: ((1, 8), (1, 0)), 4: ((1, 8), (2, 0)), 5: ((0, 8), (3, 0))}
    for r, (shape, off) in want.items():
        p = u.part("dst", r)
        check(p is not None and p[:2] == (shape, off), "uneven on rank %d: %s, want %s at %s" % (r, p, shape, off))
    check(u.part("dst", 0) is None, "rank 0 holds no destination part")
    check(ts[5].part("src", 1) == ((), (), 8), "scalar part %s" % (ts[5].part("src", 1),))


for route in ("flat", "agbcast", "hier", "auto"):
    @case("route %s: 8 tensors, 2 steps, every element checked" % route)
    def _():
        call = s.prepare(ts, route=route)
        d = call.describe()
        check(d["tensors"] == names and d["route"].startswith(route), "describe: %s" % d)
        for step in range(2):
            dst = destinations(ts)
            rep = call.run(src=sources(ts, step), dst=dst)
            check(rep["completed"] == names and rep["failed"] == [], "report %s" % rep)
            check(rep["rounds"] >= 1 and rep["seconds"] > 0, "report %s" % rep)
            verify(ts, dst, step)
        call.close()

@case("fused buffers from m2n.fuse: [q; k; v] by rows on the generator, [gate; up] on both sides, every element")
def _():
    q = m2n.Tensor("q", (8, 16), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [R(), S(0)]))
    k = m2n.Tensor("k", (4, 16), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [R(), S(0)]))
    v = m2n.Tensor("v", (4, 16), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [R(), S(0)]))
    gate = m2n.Tensor("gate", (12, 8), "float32", src=(trainer, [S(0)]), dst=(generator, [R(), S(1)]))
    up = m2n.Tensor("up", (12, 8), "float32", src=(trainer, [S(0)]), dst=(generator, [R(), S(1)]))
    qkv = m2n.fuse([q, k, v], "dst", rank)                   # vLLM's qkv_proj
    fc1 = m2n.fuse([gate, up], "src", rank)                  # Megatron's linear_fc1
    gate_up = m2n.fuse(fc1.tensors, "dst", rank)             # vLLM's gate_up_proj: the views of both sides
    if rank in generator:
        check(qkv.shape == (8, 16) and qkv.layout == {"q": (0, 4), "k": (4, 6), "v": (6, 8)}, "qkv %r %s" %
              (qkv, qkv.layout))
        check(gate_up.shape == (24, 4), "gate_up %r" % gate_up)
    else:
        check(qkv.shape is None and qkv.empty() is None and qkv.buffers(None) == {}, "qkv on a trainer rank %r" % qkv)
        check(fc1.shape == (12, 8), "fc1 %r" % fc1)
    every = qkv.tensors + gate_up.tensors
    call = s.prepare(every, route="hier")
    seeds = {t.name: 100 + i for i, t in enumerate(every)}

    def want(t, step):
        p = t.part("dst" if rank in generator else "src", rank)
        return box(pattern(t.shape, 2 if t.dtype == "bfloat16" else 4, seeds[t.name], step), p[1], p[0])

    for step in range(2):
        src, dst = {}, {}
        if rank in trainer:
            plain = {}
            for t in qkv.tensors:  # unfused on the trainer: each its own array
                plain[t.name] = np.ascontiguousarray(want(t, step))
            buf = fc1.empty()
            for name, part in fc1.parts(buf).items():
                part.view(np.uint32)[...] = want(next(t for t in every if t.name == name), step)
            src = dict(plain, **fc1.buffers(buf))
        if rank in generator:
            bq, bg = qkv.empty(), gate_up.empty()
            raw(bq)[...] = 0xAAAA
            raw(bg)[...] = 0xAAAAAAAA
            dst = dict(qkv.buffers(bq), **gate_up.buffers(bg))
        rep = call.run(src=src, dst=dst)
        check(rep["completed"] == [t.name for t in every], "report %s" % rep)
        if rank in generator:
            for fused, buf in ((qkv, bq), (gate_up, bg)):
                for name, part in fused.parts(buf).items():
                    t = next(t for t in every if t.name == name)
                    bad = int(np.count_nonzero(raw(part) != want(t, step)))
                    check(bad == 0, "step %d, %s in %r: %d of %d elements wrong" % (step, name, fused, bad, part.size))
    call.close()


@case("versions: counted, set, agreed (a rank that differs fails every rank), held after a bad step")
def _():
    call = s.prepare(ts, route="flat")
    check(call.held == {"version": 0, "verified": False, "intact": True}, "held before any step %s" % call.held)
    call.run(src=sources(ts, 0), dst=destinations(ts))
    check(call.version == 1, "version after one step: %s" % call.held)
    dst = destinations(ts)
    call.run(src=sources(ts, 1), dst=dst, version=41)
    verify(ts, dst, 1)
    check(call.held == {"version": 41, "verified": False, "intact": True}, "held %s" % call.held)
    e = expect(m2n.ValidationError, call.run, src=sources(ts, 0), dst=destinations(ts), version=50 if rank != 4 else 49)
    check(e is None or "rank 4 begins the step as version 49, rank 0 as version 50" in str(e), "error %s" % e)
    check(call.version == 41, "a refused step changed the held version: %s" % call.held)
    call.run(src=sources(ts, 0), dst=destinations(ts))
    check(call.version == 42, "the step after: %s" % call.held)
    expect(m2n.ValidationError, call.run, src=sources(ts, 0), dst=destinations(ts), version=0)
    call.close()


call = s.prepare(ts, route="flat")


def bad_step(bad_rank, mutate):
    """Runs a step in which bad_rank's buffers are mutated; returns the
    error every rank raised, after checking a good step still passes."""
    src, dst = sources(ts, 0), destinations(ts)
    if rank == bad_rank:
        mutate(src, dst)
    e = expect(m2n.ValidationError, call.run, src=src, dst=dst)
    dst = destinations(ts)
    call.run(src=sources(ts, 1), dst=dst)
    verify(ts, dst, 1)
    return e


def names_it(e, r, tensor, side, *words):
    if e is None:
        return
    check(e.rank == r, "error names rank %s, want %d: %s" % (e.rank, r, e))
    check(e.tensor == tensor and e.side == side, "error names %s %s, want %s %s: %s" % (e.tensor, e.side, tensor, side, e))
    for w in ("rank %d" % r,) + words:
        check(w in str(e), "message lacks %r: %s" % (w, e))
    check("ValidationError" in e.kind and "BufferError" in e.chain, "kind %s, chain %s" % (e.kind, e.chain))


@case("a destination of another dtype on rank 3: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        dst["o_proj"] = dst["o_proj"].view(np.int32)
    names_it(bad_step(3, mutate), 3, "o_proj", "destination", "dtype i32", "the tensor's is f32")


@case("a non-contiguous source on rank 1: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        a = src["embed"]
        src["embed"] = np.ascontiguousarray(a.T).T  # same shape and values, column-major
    names_it(bad_step(1, mutate), 1, "embed", "source", "not contiguous")


@case("a destination one element short on rank 4: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        dst["norm"] = dst["norm"][:-1]
    names_it(bad_step(4, mutate), 4, "norm", "destination", "has shape (15,)", "this rank's part is (16,)")


@case("a source of the right size but transposed on rank 1 (w.T.copy()): ValidationError on every rank, naming "
      "the tensor, the side, the shape wanted and the shape given")
def _():
    def mutate(src, dst):
        src["embed"] = src["embed"].T.copy()  # (16, 20) for the part (20, 16): same bytes, contiguous
    names_it(bad_step(1, mutate), 1, "embed", "source", "has shape (16, 20)", "this rank's part is (20, 16)")


@case("a destination flattened to the right size on rank 5: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        dst["experts"] = dst["experts"].reshape(-1)
    e = bad_step(5, mutate)
    if e is not None:
        want = "(%s)" % ", ".join(str(d) for d in ts[3].local_shape("dst", 5))
        names_it(e, 5, "experts", "destination", "has shape (", "this rank's part is " + want)


@case("a source for a tensor the call lacks on rank 0: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        src["lm_head"] = np.zeros(4, np.float32)
    e = bad_step(0, mutate)
    if e is not None:
        check(e.rank == 0 and "rank 0" in str(e) and "lm_head" in str(e), "error %s" % e)


@case("a missing source on rank 1: ValidationError on every rank, naming it")
def _():
    def mutate(src, dst):
        del src["experts"]
    names_it(bad_step(1, mutate), 1, "experts", "source", "missing")


@case("rank 2 prepares another destination layout: AgreementError on every rank, naming it and the field")
def _():
    mine = tensors(o_proj=[R(), S(0)] if rank == 2 else None)
    e = expect(m2n.AgreementError, s.prepare, mine, route="hier")
    if e is not None:
        check(e.rank == 2 and e.field == "destination placements" and e.tensor == "o_proj", "error %s (%s)" % (e, e.detail))
        check(e.detail.get("differing") == [2], "differing %s" % e.detail.get("differing"))
        check("rank 2" in str(e) and "destination placements" in str(e), "message %s" % e)


@case("rank 5 gives a shard dim out of range: ValidationError on every rank, naming it and the tensor")
def _():
    mine = tensors(bad=S(3) if rank == 5 else None)
    e = expect(m2n.ValidationError, s.prepare, mine)
    if e is not None:
        check(e.rank == 5 and "rank 5" in str(e) and "double" in str(e) and "shard dim 3" in str(e), "error %s" % e)


@case("an unknown route: ValidationError naming the field")
def _():
    e = expect(m2n.ValidationError, s.prepare, ts, route="warp")
    if e is not None:
        check(e.field == "route" and "warp" in str(e), "error %s (%s)" % (e, e.detail))


@case("the session is still usable after every error")
def _():
    dst = destinations(ts)
    rep = call.run(src=sources(ts, 5), dst=dst)
    check(not s.aborted and rep["completed"] == names, "aborted %s, report %s" % (s.aborted, rep))
    verify(ts, dst, 5)


@case("a session option one rank cannot read fails every rank's join, naming it")
def _():
    e = expect(m2n.ValidationError, m2n.Session, comm, device="tpu" if rank == 3 else "cpu")
    if e is not None:
        check(e.rank == 3 and "rank 3" in str(e) and "device 'tpu'" in str(e), "error %s (%s)" % (e, e.detail))
    e = expect(m2n.ValidationError, m2n.Session, comm, timeout="soon" if rank == 1 else 30)
    if e is not None:
        check(e.rank == 1 and "timeout 'soon'" in str(e), "error %s (%s)" % (e, e.detail))
    e = expect(m2n.ValidationError, m2n.Session, comm, timeout=float("nan") if rank == 2 else 30)
    if e is not None:
        check(e.rank == 2 and e.field == "timeout_seconds" and "timeout_seconds NaN" in str(e), "error %s (%s)" %
              (e, e.detail))


@case("bad arguments on this rank alone raise at once")
def _():
    expect(ValueError, m2n.Shard, -1)
    expect(ValueError, m2n.Mesh, [[0, 1], [2]])
    expect(ValueError, m2n.Layout, trainer, ["P"])


call.close()
s.close()


@case("closed handles raise InvalidArgument")
def _():
    expect(m2n.InvalidArgument, call.run)
    expect(m2n.InvalidArgument, s.prepare, ts)


finish()
