"""LoRA from Python (mpirun -np 6): a small Llama, Megatron tp=2,pp=2 to
vLLM tp=2, synced in full once; then Model.lora(8, alpha=16) prepares the
adapters of every attention and MLP projection as a model of their own,
and two adapter steps each move only the adapters (every destination
element of them checked) and merge them into the generator's weights
(Model.merge_lora). Every element of every weight part on every
generator rank is then compared with the merges numpy computes from the
whole matrices, in the same float32 sums (each product rounded, k in
order, the previous step's product taken away, one rounding to
bfloat16); weights without adapters keep the full sync's values. A
target the model lacks raises ValidationError on every rank; merging
adapters into a model they were not made from raises InvalidArgument."""

import numpy as np

from harness import case, check, comm, expect, finish, m2n, rank
from models import LLAMA, adapter_values, as_f32, base_values, bf16_bits, config, fill, poisoned, remove_config, verify

assert comm.size == 6, "run with mpirun -np 6"

RANK, ALPHA = 8, 16.0
GENERATOR = range(4, 6)


def round_bf16(x):
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def adapter_names(weight):
    module = weight[:-len(".weight")]
    return module + ".lora_A.weight", module + ".lora_B.weight"


def merged(weight, shape, steps):
    """The weight's global bits after steps merges ([out, in] shape)."""
    out, inn = shape
    a_name, b_name = adapter_names(weight)
    w = bf16_bits(weight, (out, inn))
    s = np.float32(ALPHA / RANK)
    prev = None
    for step in range(1, steps + 1):
        A = as_f32(bf16_bits("%s@%d" % (a_name, step), (RANK, inn)))
        B = as_f32(bf16_bits("%s@%d" % (b_name, step), (out, RANK)))
        acc = as_f32(w)
        for k in range(RANK):
            acc = acc + (s * B[:, k])[:, None] * A[k][None, :]
        if prev is not None:
            Ap, Bp = prev
            for k in range(RANK):
                acc = acc + (-(s * Bp[:, k]))[:, None] * Ap[k][None, :]
        w, prev = round_bf16(acc), (A, B)
    return w


s = m2n.Session(comm, timeout=60)
path = config("lora-llama", LLAMA)


@case("Llama tp=2,pp=2 to tp=2: a full sync, then two LoRA steps (rank 8, alpha 16) moving only the adapters and "
      "merging them on the generator; every element of every weight against numpy's merges")
def _():
    m = s.prepare_model(path, "tp=2,pp=2", "tp=2")
    dst = poisoned(m)
    rep = m.run(src=fill(m, base_values), dst=dst)
    check(rep["failed"] == 0, "full sync: %s" % rep)
    verify(m, dst, base_values, "the full sync")
    ad = m.lora(RANK, alpha=ALPHA)
    names = {p["tensor"] for side in ("src", "dst") for b in ad.buffers(side).values() for p in b["parts"]}
    names = comm.allreduce([names])
    names = set().union(*names)
    check(len(names) == 2 * 7 * LLAMA["num_hidden_layers"], "%d adapter tensors: %s" % (len(names), sorted(names)))
    adapted = {n[:-len(".lora_A.weight")] + ".weight" for n in names if n.endswith(".lora_A.weight")}
    steps = 2
    for step in range(1, steps + 1):
        adst = poisoned(ad)
        rep = ad.run(src=fill(ad, adapter_values(step)), dst=adst)
        check(rep["failed"] == 0, "adapter step %d: %s" % (step, rep))
        verify(ad, adst, adapter_values(step), "adapter step %d" % step)
        m.merge_lora(ad, dst, adst)
    cache = {}

    def want(tensor, layout_shape, itemsize):
        if tensor not in adapted:
            return base_values(tensor, layout_shape, itemsize)
        if tensor not in cache:
            shape = [p["shape"] for b in m.buffers("dst").values() for p in b["parts"] if p["tensor"] == tensor][0]
            cache[tensor] = merged(tensor, tuple(shape), steps)
        return cache[tensor].reshape(layout_shape)

    parts = verify(m, dst, want, "after %d merges" % steps)
    if rank in GENERATOR:
        check(parts > 0, "generator rank %d checked no parts" % rank)
    bad = expect(m2n.ValidationError, m.lora, RANK, targets=["experts"])
    if bad is not None:
        check("experts" in str(bad), "error %s" % bad)
    other = m.lora(RANK, targets=["q_proj"])
    e = expect(m2n.InvalidArgument, ad.merge_lora, other, {}, {})
    if e is not None:
        check("was not made from this model" in str(e), "error %s" % e)
    for x in (other, ad, m):
        x.close()


s.close()
remove_config(path)
finish()
