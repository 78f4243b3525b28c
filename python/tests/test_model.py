"""Whole models from Python (mpirun -np 6): a small Llama (dense, fused qkv
and gate/up) and a small Qwen3-MoE (experts over EP) laid out from a
Megatron trainer tp=2, pp=2 (ranks 0-3) to a vLLM generator tp=2 (ranks
4-5), moved through their fused buffers by name, every element of every
part checked through the views the model describes; then a bad buffer on
one rank raises the same ValidationError on every rank, naming it."""

import json
import os
import tempfile
import zlib

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness import box, case, check, comm, expect, fail, finish, m2n, pattern, rank, raw

assert comm.size == 6, "run with mpirun -np 6"

LLAMA = {"model_type": "llama", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 256, "dtype": "bfloat16"}
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 96, "moe_intermediate_size": 32, "num_local_experts": 4,
             "num_experts_per_tok": 2, "num_hidden_layers": 2, "vocab_size": 256, "dtype": "bfloat16"}


def config(name, body):
    """A config.json that every rank reads (the model name, the file's,
    must agree): rank 0 writes it."""
    path = comm.bcast(os.path.join(tempfile.gettempdir(), "m2n-test-%s-%d.json" % (name, os.getpid())), root=0)
    if rank == 0:
        with open(path, "w") as f:
            json.dump(body, f)
    comm.Barrier()
    return path


def seed(tensor):
    return zlib.crc32(tensor.encode()) & 0xffff


def part_view(buf, p):
    """The strided view of a buffer that holds one part."""
    b = raw(buf)
    return as_strided(b[p["view_offset"]:], shape=tuple(p["local_shape"]),
                      strides=tuple(st * b.itemsize for st in p["view_strides"]), writeable=True)


def fill(m, step):
    """The sources, filled through Model.parts (verify reads through
    part_view, the test's own)."""
    src = m.empty("src")
    parts = {p["tensor"]: p for b in m.buffers("src").values() for p in b["parts"]}
    for tensor, view in m.parts("src", {k: raw(a) for k, a in src.items()}).items():
        p = parts[tensor]
        view[...] = box(pattern(p["layout_shape"], view.itemsize, seed(tensor), step), p["offset"], p["local_shape"])
    return src


def poisoned(m):
    dst = m.empty("dst")
    for a in dst.values():
        raw(a)[...] = np.array(0xAAAAAAAA).astype(raw(a).dtype)
    return dst


def verify(m, dst, step):
    parts = 0
    for name, b in m.buffers("dst").items():
        for p in b["parts"]:
            parts += 1
            want = box(pattern(p["layout_shape"], dst[name].itemsize, seed(p["tensor"]), step), p["offset"],
                       p["local_shape"])
            got = part_view(dst[name], p)
            bad = np.argwhere(got != want)
            if len(bad):
                k = tuple(bad[0])
                fail("buffer %s, tensor %s step %d: %d of %d elements wrong; first at %s: got %#x, want %#x" %
                     (name, p["tensor"], step, len(bad), got.size, k, int(got[k]), int(want[k])))
    return parts


s = m2n.Session(comm, timeout=60)
for name, body, trainer, generator in (("llama", LLAMA, "tp=2,pp=2", "tp=2"),
                                       ("qwen3-moe", QWEN3_MOE, "tp=2,pp=2,ep=2", "tp=2,ep=2")):
    path = config(name, body)

    @case("%s: trainer %s to generator %s, 2 steps, every element of every part" % (name, trainer, generator))
    def _():
        m = s.prepare_model(path, trainer, generator, route="hier")
        info = m.info
        check(info["world"] == 6 and info["stages"] == 2, "info %s" % {k: info[k] for k in ("world", "stages")})
        if rank >= 4:
            check(m.buffers("src") == {} and len(m.buffers("dst")) > 0, "generator rank buffers")
            fused = [b for b in m.buffers("dst").values() if len(b["parts"]) > 1]
            check(any("qkv_proj" in b["name"] for b in fused), "no fused qkv_proj among %s" % [b["name"] for b in fused])
        else:
            check(m.buffers("dst") == {} and len(m.buffers("src")) > 0, "trainer rank buffers")
        for step in range(2):
            dst = poisoned(m)
            rep = m.run(src=fill(m, step), dst=dst)
            # the whole model's tensors on every rank, trainer ranks of one
            # stage included
            check(rep["failed"] == 0 and rep["completed"] == info["tensors"], "report %s, want %d completed" %
                  (rep, info["tensors"]))
            verify(m, dst, step)
        # every tensor of the model reached the generator: the two TP ranks'
        # parts together name all of them.
        mine = set(p["tensor"] for b in m.buffers("dst").values() for p in b["parts"])
        every = set().union(*comm.allgather(mine))
        check(len(every) == info["tensors"], "%d tensors reached the generator, the model has %d" %
              (len(every), info["tensors"]))

        def short(src, dst):
            k = sorted(dst)[0]
            dst[k] = dst[k][:-1]

        def strided(src, dst):
            k = sorted(src)[0]
            src[k] = np.repeat(src[k], 2)[::2]

        def transposed(src, dst):
            # a buffer holding one dense part, given 2-dim and transposed
            for k, b in m.buffers("dst").items():
                if len(b["parts"]) == 1 and len(b["parts"][0]["local_shape"]) == 2:
                    r, c = b["parts"][0]["local_shape"]
                    if r != c:
                        dst[k] = dst[k].reshape(c, r)
                        return

        for bad_rank, mutate, words in ((4, short, ("rank 4", ("another size", "has shape"))),
                                        (1, strided, ("rank 1", "not contiguous")),
                                        (5, transposed, ("rank 5", "has shape", "want ("))):
            src, dst = fill(m, 0), poisoned(m)
            if rank == bad_rank:
                mutate(src, dst)
            e = expect(m2n.ValidationError, m.run, src=src, dst=dst)
            if e is not None:
                for w in words:
                    alts = w if isinstance(w, tuple) else (w,)
                    check(any(a in str(e) for a in alts), "message lacks %r: %s" % (w, e))
        dst = poisoned(m)
        m.run(src=fill(m, 3), dst=dst)
        verify(m, dst, 3)
        m.close()
    comm.Barrier()
    if rank == 0:
        os.remove(path)


@case("a model that does not load raises ValidationError naming the field")
def _():
    e = expect(m2n.ValidationError, s.prepare_model, "no-such-model", "tp=2,pp=2", "tp=2")
    if e is not None:
        check(e.field == "model" and "no-such-model" in str(e), "error %s (%s)" % (e, e.detail))
    e = expect(m2n.ValidationError, s.prepare_model, "llama-3.1-70b", "tp=2,pp=2", "tp=4", scale=64, layers=2)
    if e is not None:
        check("ranks" in str(e), "error %s" % e)


s.close()
finish()
