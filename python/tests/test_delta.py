"""Delta mode from Python (mpirun -np 6): Session(delta=True) moves three
tensors (bf16 with replicated destinations, float32, float16) from 2
trainer ranks to a DP2 x TP2 generator, on flat, hier, and hier with
atomic. The first step is a full sync; each later step changes 1% of every
tensor's elements (to values no step held before) and is a delta step
whose bytes over the ranks are under a quarter of the dense ones; every
destination element is checked after every step against the tensors
after that step's changes, so a delta that moved nothing, or the wrong
elements, fails. call.resync() on one rank makes the next step a full
sync on every rank (restoring a destination overwritten outside the
call). A whole model (a small Llama, Megatron tp=2,pp=2 to vLLM tp=2) in
delta mode likewise, with Model.resync() on a generator rank (which is in
every stage). A route that forwards what it
did not receive whole (agbcast) and a CUDA session in delta mode raise
ValidationError on every rank; a session not in delta mode reports full
syncs."""

import functools

import numpy as np

from harness import box, case, check, comm, expect, fail, finish, m2n, pattern, rank, raw
from models import LLAMA, config, fill, poisoned, seed, remove_config, verify

assert comm.size == 6, "run with mpirun -np 6"

FRACTION = 0.01
S, R = m2n.Shard, m2n.Replicate
trainer = m2n.Mesh(range(0, 2))
generator = m2n.Mesh([[2, 3], [4, 5]])  # DP2 x TP2
TENSORS = [
    m2n.Tensor("w", (256, 128), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [R(), S(1)])),
    m2n.Tensor("b", (96, 64), "float32", src=(trainer, [S(1)]), dst=(generator, [R(), S(0)])),
    m2n.Tensor("n", (640,), "float16", src=(trainer, [R()]), dst=(generator, [R(), S(0)])),
]
NUMPY = {"bfloat16": np.uint16, "float32": np.float32, "float16": np.float16}  # raw bits for bf16
ITEMSIZE = {k: np.dtype(v).itemsize for k, v in NUMPY.items()}


@functools.lru_cache(maxsize=None)
def changed(shape, itemsize, key, updates):
    """A tensor's global raw bits after updates 1 to updates: its pattern,
    then each update flips bits of a seeded 1% of the elements (an odd
    mask, so that every chosen element changes), the same on every rank."""
    a = pattern(shape, itemsize, key, 0).reshape(-1).copy()
    for u in range(1, updates + 1):
        rng = np.random.default_rng(key * 1009 + u)
        idx = rng.choice(a.size, size=max(1, int(a.size * FRACTION)), replace=False)
        a[idx] ^= pattern((a.size,), itemsize, key, u)[idx] | 1
    a.flags.writeable = False
    return a.reshape(shape)


def values(updates):
    """models.py's values: every tensor after updates."""
    return lambda tensor, shape, itemsize: changed(tuple(shape), itemsize, seed(tensor), updates)


def sources(updates):
    out = {}
    for i, t in enumerate(TENSORS):
        p = t.part("src", rank)
        if p is not None:
            g = changed(t.shape, ITEMSIZE[t.dtype], i, updates)
            out[t.name] = np.ascontiguousarray(box(g, p[1], p[0])).view(NUMPY[t.dtype])
    return out


def destinations():
    """This rank's destinations, every byte 0xAA."""
    out = {}
    for t in TENSORS:
        shape = t.local_shape("dst", rank)
        if shape is not None:
            n = int(np.prod(shape)) * ITEMSIZE[t.dtype]
            out[t.name] = np.full(n, 0xAA, dtype=np.uint8).view(NUMPY[t.dtype]).reshape(shape)
    return out


def check_calls(dst, updates, what):
    """Every element of every destination part against the tensors after
    updates."""
    for i, t in enumerate(TENSORS):
        p = t.part("dst", rank)
        if p is None:
            continue
        want = box(changed(t.shape, ITEMSIZE[t.dtype], i, updates), p[1], p[0])
        bad = np.argwhere(raw(dst[t.name]) != want)
        if len(bad):
            k = tuple(bad[0])
            fail("%s: tensor %s: %d of %d elements wrong; first at local %s: got %#x, want %#x" %
                 (what, t.name, len(bad), want.size, k, int(raw(dst[t.name])[k]), int(want[k])))


def totals(rep):
    """(sent, dense) bytes of a step, sends and copies, summed over the ranks."""
    sent = rep["sent"]["network"] + rep["sent"]["local"] + rep["copied"]
    dense = sum(rep["dense"].values())
    return comm.allreduce(sent), comm.allreduce(dense)


def check_full(rep, what, full=None):
    """A full sync on this rank: no delta, dense equal to sent; over the
    ranks, full bytes when full is given. Returns the total sent."""
    check(not rep["delta"], "%s: delta %s, want a full sync" % (what, rep["delta"]))
    mine = {"network": rep["sent"]["network"], "local": rep["sent"]["local"], "copied": rep["copied"]}
    check(rep["dense"] == mine, "%s: dense %s, want what a full sync sent, %s" % (what, rep["dense"], mine))
    sent, dense = totals(rep)
    check(sent == dense and (full is None or sent == full), "%s: %d bytes sent, %d dense over the ranks, want %s" %
          (what, sent, dense, full))
    return sent


def check_delta(rep, what, full):
    """A delta step everywhere, under a quarter of the full sync's bytes."""
    check(rep["delta"], "%s: delta %s, want a delta step" % (what, rep["delta"]))
    sent, dense = totals(rep)
    check(dense == full and 0 < sent < full // 4, "%s: %d bytes sent, %d dense over the ranks; want some, under a "
          "quarter of the full sync's %d" % (what, sent, dense, full))
    if rank == 0:
        print("     %s: %d of %d dense bytes sent over the ranks" % (what, sent, dense), flush=True)


# Three sessions on one communicator, open side by side to the end.
delta = m2n.Session(comm, timeout=60, delta=True, dst_domain_size=2)
atomic = m2n.Session(comm, timeout=60, delta=True, atomic=True, dst_domain_size=2)
plain = m2n.Session(comm, timeout=60, dst_domain_size=2)

for route, s in (("flat", delta), ("hier", delta), ("hier", atomic)):
    @case("route %s%s: a full sync, 1%% changed as delta steps, one rank's resync; every element" %
          (route, ", atomic" if s is atomic else ""))
    def _():
        call = s.prepare(TENSORS, route=route)
        dst = destinations()  # kept: delta steps write in place
        rep = call.run(src=sources(0), dst=dst)
        check_calls(dst, 0, "step 1")
        full = check_full(rep, "step 1")
        for u in (1, 2):
            rep = call.run(src=sources(u), dst=dst)
            check_calls(dst, u, "step %d" % (u + 1))
            check_delta(rep, "%s step %d (1%% changed)" % (route, u + 1), full)
        if rank == 5:
            call.resync()
        if rank == 3:
            for a in dst.values():
                raw(a)[...] = 0x5A  # changed outside the call
        rep = call.run(src=sources(3), dst=dst)
        check_calls(dst, 3, "the step after rank 5's resync")
        check_full(rep, "the step after rank 5's resync", full)
        rep = call.run(src=sources(4), dst=dst)
        check_calls(dst, 4, "the step after that")
        check_delta(rep, "%s, after the resync" % route, full)
        call.close()


@case("delta mode refuses agbcast (it forwards what it did not receive whole) on every rank")
def _():
    e = expect(m2n.ValidationError, delta.prepare, TENSORS, route="agbcast")
    if e is not None:
        check("did not arrive whole" in str(e), "error %s" % e)


@case("a whole model in delta mode: Llama tp=2,pp=2 to tp=2, 1% changed, a generator rank's Model.resync; "
      "every element of every part")
def _():
    path = config("delta-llama", LLAMA)
    m = delta.prepare_model(path, "tp=2,pp=2", "tp=2")
    dst = poisoned(m)
    rep = m.run(src=fill(m, values(0)), dst=dst)
    check(rep["failed"] == 0, "report %s" % rep)
    verify(m, dst, values(0), "step 1")
    full = check_full(rep, "model step 1")
    rep = m.run(src=fill(m, values(1)), dst=dst)
    verify(m, dst, values(1), "step 2")
    check_delta(rep, "the model, step 2 (1% changed)", full)
    if rank == 4:
        # a generator rank is in every stage: its resync covers the model
        # (a trainer rank's, its own stage only)
        m.resync()
        dst = poisoned(m)  # new arrays: what the last step delivered is not in them
    rep = m.run(src=fill(m, values(2)), dst=dst)
    verify(m, dst, values(2), "the step after rank 4's resync")
    check_full(rep, "the model, after rank 4's resync", full)
    rep = m.run(src=fill(m, values(3)), dst=dst)
    verify(m, dst, values(3), "the step after that")
    check_delta(rep, "the model, after the resync", full)
    m.close()
    remove_config(path)


@case("a CUDA session in delta mode raises ValidationError naming delta on every rank, before it opens a GPU")
def _():
    e = expect(m2n.ValidationError, m2n.Session, comm, device="cuda", delta=True, timeout=60)
    if e is not None:
        check(e.field == "delta" and "host memory" in str(e), "error %s (detail %s)" % (e, e.detail))


@case("a session not in delta mode: every step a full sync, resync does nothing")
def _():
    call = plain.prepare(TENSORS, route="hier")
    full = None
    for u in range(2):
        dst = destinations()
        call.resync()
        rep = call.run(src=sources(u), dst=dst)
        check_calls(dst, u, "step %d" % (u + 1))
        full = check_full(rep, "step %d" % (u + 1), full)
    call.close()


for s in (delta, atomic, plain):
    s.close()
finish()
