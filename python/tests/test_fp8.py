"""FP8 in flight from Python (mpirun -np 4): bf16 and float32 tensors from 2
trainer ranks arrive on 2 generator ranks as float8_e4m3fn with their
float32 scales (block, row and tensor scaling, a 3-dim expert tensor), the
bytes and the scales checked exactly: every value is one E4M3 represents
and every block holds 448, E4M3's largest, so every scale is 1 and every
byte the value's encoding. Then a missing scale buffer and a NaN raise the
same ValidationError on every rank, naming the rank; a whole model served
in FP8 moves with its scales."""

import numpy as np

from harness import ENCODE, as_dtype, case, check, comm, e4m3_values, expect, fail, finish, m2n, rank
from models import config, remove_config

assert comm.size == 4, "run with mpirun -np 4"

S, R = m2n.Shard, m2n.Replicate
trainer, generator = m2n.Mesh([0, 1]), m2n.Mesh([2, 3])


ts = [
    m2n.Tensor("blocks", (256, 256), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [S(1)]),
               dst_dtype="float8_e4m3fn", scale="block"),
    m2n.Tensor("rows", (64, 96), "float32", src=(trainer, [S(1)]), dst=(generator, [S(0)]),
               dst_dtype="float8_e4m3fn", scale="row"),
    m2n.Tensor("experts", (2, 130, 64), "bfloat16", src=(trainer, [S(1)]), dst=(generator, [S(0)]),
               dst_dtype="float8_e4m3fn", scale="tensor"),
    m2n.Tensor("norm", (64,), "bfloat16", src=(trainer, [R()]), dst=(generator, [R()])),  # stays bf16
]
MODES = {"blocks": "block", "rows": "row", "experts": "tensor", "norm": None}
full = {t.name: e4m3_values(t.shape, MODES[t.name], i) for i, t in enumerate(ts)}


def sources():
    out = {}
    for t in ts:
        p = t.part("src", rank)
        if p is not None:
            out[t.name] = np.ascontiguousarray(as_dtype(full[t.name], t.dtype)[tuple(slice(o, o + n) for o, n in zip(p[1], p[0]))])
    return out


s = m2n.Session(comm, timeout=60)
call = s.prepare(ts)


@case("bf16 and f32 to E4M3 in flight (block, row, tensor scales): every byte and every scale")
def _():
    dst, scale = call.empty("dst"), call.empty("scale")
    check(rank < 2 or sorted(scale) == ["blocks", "experts", "rows"], "scale buffers %s" % sorted(scale))
    if rank == 2:
        check(scale["blocks"].shape == (2, 1), "block scales of rank 2: %s" % (scale["blocks"].shape,))
        check(ts[0].scale_part(2)[1] == (0, 0) and ts[0].scale_part(3)[1] == (0, 1), "scale offsets")
    rep = call.run(src=sources(), dst=dst, scale=scale)
    check(rep["completed"] == [t.name for t in ts], "report %s" % rep)
    for t in ts:
        p = t.part("dst", rank)
        if p is None:
            continue
        want = full[t.name][tuple(slice(o, o + n) for o, n in zip(p[1], p[0]))]
        if MODES[t.name] is None:
            check(np.array_equal(dst[t.name], as_dtype(want, t.dtype)), "%s differs" % t.name)
            continue
        wb = np.vectorize(ENCODE.__getitem__, otypes=[np.uint8])(want)
        bad = np.argwhere(dst[t.name] != wb)
        if len(bad):
            k = tuple(bad[0])
            fail("%s: %d bytes wrong, first at %s: %#x, want %#x" % (t.name, len(bad), k, dst[t.name][k], wb[k]))
        check(np.all(scale[t.name] == 1.0), "%s scales %s, want all 1" % (t.name, scale[t.name].ravel()[:8]))


@case("a missing scale buffer on rank 3: ValidationError on every rank, naming it")
def _():
    dst, scale = call.empty("dst"), call.empty("scale")
    if rank == 3:
        del scale["rows"]
    e = expect(m2n.ValidationError, call.run, src=sources(), dst=dst, scale=scale)
    if e is not None:
        check(e.rank == 3 and e.side == "scale" and e.tensor == "rows" and "scale buffer is missing" in str(e), "error %s" % e)


@case("a NaN in a source on rank 1: ValidationError on every rank, naming the tensor and index")
def _():
    src = sources()
    if rank == 1:
        src["rows"][3, 5] = np.nan
    e = expect(m2n.ValidationError, call.run, src=src, dst=call.empty("dst"), scale=call.empty("scale"))
    if e is not None:
        check(e.rank == 1 and e.tensor == "rows" and "NonFiniteError" in e.chain and "NaN" in str(e), "error %s (%s)" %
              (e, e.detail))


@case("a model served in FP8 (block scales): every scale tensor written, finite and positive")
def _():
    # head_dim 128: each key-value head's rows are whole 128-row blocks, so
    # the checkpoint's block scales are m2n's (else block is refused)
    cfg = {"model_type": "llama", "hidden_size": 256, "head_dim": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 256, "num_hidden_layers": 1, "vocab_size": 256, "dtype": "bfloat16"}
    path = config("fp8", cfg)
    m = s.prepare_model(path, "tp=2", "tp=2", fp8="block")
    src = m.empty("src")
    for a in src.values():
        a[...] = as_dtype(np.linspace(-2, 2, a.size), "bfloat16")
    dst, scale = m.empty("dst"), m.empty("scale")
    for a in scale.values():
        a[...] = -1
    if rank >= 2:
        check(len(scale) > 0 and any(b["dtype"] == "fp8e4m3" for b in m.buffers("dst").values()), "no FP8 buffers")
    rep = m.run(src=src, dst=dst, scale=scale)
    check(rep["failed"] == 0 and rep["completed"] > 0, "report %s" % rep)
    for name, a in scale.items():
        check(np.all(np.isfinite(a)) and np.all(a > 0), "%s: scales %s" % (name, a[:4]))
    m.close()
    remove_config(path)


call.close()
s.close()
finish()
