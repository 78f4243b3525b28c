"""Whole models from Python (mpirun -np 6): a small Llama (dense, fused qkv
and gate/up) and a small Qwen3-MoE (experts over EP) laid out from a
Megatron trainer tp=2, pp=2 (ranks 0-3) to a vLLM generator tp=2 (ranks
4-5), moved through their fused buffers by name, every element of every
part checked through the views the model describes; then a bad buffer on
one rank raises the same ValidationError on every rank, naming it."""

import json
import os

import numpy as np

from harness import case, check, comm, expect, fail, finish, m2n, rank
from models import LLAMA, config, fill, poisoned, remove_config, stepped, verify

assert comm.size == 6, "run with mpirun -np 6"

QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 96, "moe_intermediate_size": 32, "num_local_experts": 4,
             "num_experts_per_tok": 2, "num_hidden_layers": 2, "vocab_size": 256, "dtype": "bfloat16"}


s = m2n.Session(comm, timeout=60)
for name, body, trainer, generator in (("llama", LLAMA, "tp=2,pp=2", "tp=2"),
                                       ("qwen3-moe", QWEN3_MOE, "tp=2,pp=2,ep=2,etp=1", "tp=2,ep=2")):
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
            rep = m.run(src=fill(m, stepped(step)), dst=dst, version=7 + step)
            # the whole model's tensors on every rank, trainer ranks of one
            # stage included
            check(rep["failed"] == 0 and rep["completed"] == info["tensors"], "report %s, want %d completed" %
                  (rep, info["tensors"]))
            verify(m, dst, stepped(step), "step %d" % step)
            check(m.held == {"version": 7 + step, "verified": False, "intact": True}, "model held %s" % m.held)
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
            src, dst = fill(m, stepped(0)), poisoned(m)
            if rank == bad_rank:
                mutate(src, dst)
            e = expect(m2n.ValidationError, m.run, src=src, dst=dst)
            if e is not None:
                for w in words:
                    alts = w if isinstance(w, tuple) else (w,)
                    check(any(a in str(e) for a in alts), "message lacks %r: %s" % (w, e))
        dst = poisoned(m)
        m.run(src=fill(m, stepped(3)), dst=dst)
        verify(m, dst, stepped(3), "step 3")
        m.close()
    remove_config(path)


@case("a model that does not load raises ValidationError naming the field")
def _():
    e = expect(m2n.ValidationError, s.prepare_model, "no-such-model", "tp=2,pp=2", "tp=2")
    if e is not None:
        check(e.field == "model" and "no-such-model" in str(e), "error %s (%s)" % (e, e.detail))
    e = expect(m2n.ValidationError, s.prepare_model, "llama-3.1-70b", "tp=2,pp=2", "tp=4", scale=64, layers=2)
    if e is not None:
        check("ranks" in str(e), "error %s" % e)


SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "testdata", "frameworks")


def suite_cells(case, side, r):
    """What the framework conformance suite (testdata/frameworks, from
    model's independent reference of Megatron-Core and vLLM) says a rank
    holds: buffer name -> list of (tensor, flat index) or None."""
    ranks = case["trainer"] if side == "src" else case["generator"]
    out = {}
    for b in ranks[r]["buffers"]:
        cells = [None] * b["elems"]
        for off, n, t, flat, step in b["runs"]:
            for k in range(n):
                cells[off + k] = (case["tensors"][t]["name"], flat + k * step)
        out[b["name"]] = cells
    return out


def part_cells(bufs):
    """What prepare_model's buffers say a rank holds, through every part's
    view: buffer name -> list of (tensor, flat index in the transformers
    shape) or None."""
    out = {}
    for name, b in bufs.items():
        cells = [None] * b["elems"]
        for p in b["parts"]:
            ls, off, st = p["layout_shape"], p["offset"], p["view_strides"]
            for idx in np.ndindex(*p["local_shape"]):
                pos = p["view_offset"] + sum(i * s for i, s in zip(idx, st))
                g = [o + i for o, i in zip(off, idx)]
                lin = int(np.ravel_multi_index(g, ls))
                if p.get("transposed"):
                    shape = list(p["shape"])
                    moved = shape[:-2] + [shape[-1], shape[-2]]
                    mi = list(np.unravel_index(lin, moved))
                    mi[-1], mi[-2] = mi[-2], mi[-1]
                    lin = int(np.ravel_multi_index(mi, shape))
                cells[pos] = (p["tensor"], lin)
        out[name] = cells
    return out


for name in ("deepseek-lite-tp2-to-tp4", "kimi-dp2ep2-to-ep4", "mixtral-dp2ep2-to-ep4"):
    with open(os.path.join(SUITE, name + ".json")) as f:
        suite = json.load(f)

    @case("framework suite %s: prepare_model's buffers hold, element by element, what Megatron-Core and vLLM hold" % name)
    def _():
        m = s.prepare_model(os.path.join(SUITE, suite["config"]), suite["train"], suite["gen"], mtp=suite["mtp"])
        T = len(suite["trainer"])
        side, r = ("src", rank) if rank < T else ("dst", rank - T)
        got, want = part_cells(m.buffers(side)), suite_cells(suite, side, r)
        check(sum(c is not None for cells in want.values() for c in cells) > 0, "the suite gives rank %d nothing" % rank)
        check(sorted(got) == sorted(want), "buffers %s, the suite's %s" % (sorted(got), sorted(want)))
        for b in want:
            if b in got and got[b] != want[b]:
                k = next(i for i, (x, y) in enumerate(zip(got[b], want[b])) if x != y) if len(got[b]) == len(want[b]) else -1
                fail("%s rank %d buffer %s: %d elements, first difference at %d: %s, the suite %s" %
                     (side, r, b, len(got[b]), k, got[b][k] if k >= 0 else "-", want[b][k] if k >= 0 else "-"))
        # every element moves: the destination receives what the source holds
        for step in range(2):
            dst = poisoned(m)
            rep = m.run(src=fill(m, stepped(step)), dst=dst)
            check(rep["failed"] == 0, "report %s" % rep)
            verify(m, dst, stepped(step), "step %d" % step)
        if name.startswith("deepseek"):
            targets = m.refresh_targets()
            if side == "dst":
                check(sorted(t["tensor"] for t in targets) == ["model.layers.%d.self_attn.kv_b_proj.weight" % i for i in range(2)],
                      "refresh targets %s" % targets)
                check(all("W_UK_T" in t["why"] and t["buffer"] == t["tensor"] for t in targets), "reasons %s" % targets)
                seen = []
                n = m.refresh(lambda module, entries, bufs: seen.append((module, [e["tensor"] for e in entries], sorted(bufs))))
                check(n == 2 and seen[0][0] == "model.layers.0.self_attn" and seen[0][2] == ["model.layers.0.self_attn.kv_b_proj.weight"],
                      "refresh calls %s" % seen)
            else:
                check(targets == [], "a trainer rank has refresh targets %s" % targets)
        m.close()


@case("vllm_refresh_hook reruns process_weights_after_loading of the MLA attention under a refreshed layer")
def _():
    calls = []

    class Attn:
        impl = object()

        def __init__(self, name):
            self.name = name

        def process_weights_after_loading(self, act_dtype):
            calls.append((self.name, act_dtype))

    class Fake:
        def named_modules(self):
            return [("model.layers.0.self_attn", object()), ("model.layers.0.self_attn.mla_attn", Attn("l0")),
                    ("model.layers.1.self_attn.mla_attn", Attn("l1"))]

        def named_parameters(self):
            return []

    hook = m2n.vllm_refresh_hook(Fake(), act_dtype="bfloat16")
    hook("model.layers.0.self_attn", [{"tensor": "model.layers.0.self_attn.kv_b_proj.weight", "buffer": "x"}], {})
    check(calls == [("l0", "bfloat16")], "calls %s" % calls)
    e = expect(m2n.InvalidArgument, hook, "model.layers.7.self_attn",
               [{"tensor": "model.layers.7.self_attn.kv_b_proj.weight", "buffer": "x"}], {})
    if e is not None:
        check("no attention module" in str(e), "error %s" % e)


s.close()
finish()
