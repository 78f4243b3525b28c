"""LoRA merged into FP8 weights from Python (mpirun -np 3): a small Llama
from a Megatron tp=2 trainer to a vLLM tp=1 generator serving
float8_e4m3fn with row scales (prepare_model's fp8="row"), synced in full
once; then Model.lora(8, alpha=16) and two adapter steps, each merged on
the generator with Model.merge_lora(..., scale=). After each merge every
byte of every destination buffer and every scale is compared with a
numpy reference computed from the whole matrices: each adapted weight's
FP8 base as the full sync delivered it, decoded times its row's scale in
float32, plus alpha/rank x (B @ A) of the step's adapters (k in order,
each product rounded to float32), re-quantized per row (the row's amax
times float32(1/448) as its scale, each element divided by it in float32
and rounded to the nearest E4M3 value, ties to even, saturating at 448);
the other buffers and scales keep the full sync's bytes. A merge without
the scales raises InvalidArgument on the generator, writing nothing."""

import numpy as np

from harness import case, check, comm, e4m3, expect, fail, finish, m2n, rank
from models import LLAMA, adapter_values, as_f32, base_values, bf16_bits, config, fill, part_view, poisoned, remove_config, verify

assert comm.size == 3, "run with mpirun -np 3"

RANK, ALPHA = 8, 16.0
GENERATOR = 2

# E4M3's non-negative finite values, codes 0 to 0x7E, ascending.
TABLE = np.array([e4m3(b) for b in range(0x7F)], dtype=np.float64)
DECODE = np.array([e4m3(b) if b & 0x7F != 0x7F else np.nan for b in range(0x100)], dtype=np.float32)


def encode(v):
    """float32 values to E4M3 bytes: the nearest value (ties to the even
    code), magnitudes past 448 saturating, the sign kept (-0 is 0x80)."""
    a = np.minimum(np.abs(v.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(TABLE, a, side="left"), 0, len(TABLE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - TABLE[lo], TABLE[hi] - a
    code = np.where(d_hi < d_lo, hi, np.where(d_lo < d_hi, lo, np.where(hi % 2 == 0, hi, lo)))
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def merged_fp8(q0, s0, a_name, b_name, step):
    """The reference merge of one weight, whole: q0 its base bytes
    [out, in], s0 its base row scales [out]; returns the bytes and scales."""
    out, inn = q0.shape
    A = as_f32(bf16_bits("%s@%d" % (a_name, step), (RANK, inn)))
    B = as_f32(bf16_bits("%s@%d" % (b_name, step), (out, RANK)))
    s = np.float32(ALPHA / RANK)
    acc = DECODE[q0] * s0[:, None]
    for k in range(RANK):
        acc = acc + (s * B[:, k])[:, None] * A[k][None, :]
    amax = np.max(np.abs(acc), axis=1)
    scale = np.where(amax == 0, np.float32(1), amax * np.float32(1 / 448)).astype(np.float32)
    return encode((acc / scale[:, None]).astype(np.float32)), scale


s = m2n.Session(comm, timeout=60)
path = config("lora-fp8-llama", LLAMA)


@case("Llama tp=2 to an FP8 (row scales) tp=1 generator: a full sync, then two LoRA steps (rank 8, alpha 16) merged "
      "with merge_lora(scale=); every byte and scale against numpy's dequantize, add, requantize")
def _():
    m = s.prepare_model(path, "tp=2", "tp=1", fp8="row")
    dst, scale = poisoned(m), m.empty("scale")
    for a in scale.values():
        a[...] = -1
    rep = m.run(src=fill(m, base_values), dst=dst, scale=scale)
    check(rep["failed"] == 0, "full sync: %s" % rep)
    base = {k: a.copy() for k, a in dst.items()}
    base_scale = {k: a.copy() for k, a in scale.items()}
    scales = m.buffers("scale")
    by_tensor = {b["tensor"]: name for name, b in scales.items()}
    if rank == GENERATOR:
        check(len(scales) > 0 and any(b["dtype"] == "fp8e4m3" for b in m.buffers("dst").values()), "no FP8 weights")
    ad = m.lora(RANK, alpha=ALPHA)
    adapters = {p["tensor"] for b in ad.buffers("dst").values() for p in b["parts"]}
    for step in (1, 2):
        adst = poisoned(ad)
        rep = ad.run(src=fill(ad, adapter_values(step)), dst=adst)
        check(rep["failed"] == 0, "adapter step %d: %s" % (step, rep))
        verify(ad, adst, adapter_values(step), "adapter step %d" % step)
        if rank == GENERATOR and step == 1:
            e = expect(m2n.InvalidArgument, m.merge_lora, ad, dst, adst)
            if e is not None:
                check("FP8" in str(e) and "scale" in str(e), "error %s" % e)
            for k in dst:
                check(np.array_equal(dst[k], base[k]), "the refused merge wrote into %s" % k)
        m.merge_lora(ad, dst, adst, scale=scale)
        want, want_scale = {k: a.copy() for k, a in base.items()}, {k: a.copy() for k, a in base_scale.items()}
        adapted = 0
        for name, b in m.buffers("dst").items():
            for p in b["parts"]:
                module = p["tensor"][:-len(".weight")]
                a_name, b_name = module + ".lora_A.weight", module + ".lora_B.weight"
                if a_name not in adapters:
                    continue
                check(b_name in adapters and p["tensor"] in by_tensor, "%s: B or scales missing" % p["tensor"])
                check(b["dtype"] == "fp8e4m3", "%s is %s" % (p["tensor"], b["dtype"]))
                check(list(p["local_shape"]) == list(p["layout_shape"]), "%s: part %s of %s, want it whole on tp=1" %
                      (p["tensor"], p["local_shape"], p["layout_shape"]))
                shape = tuple(p["shape"])
                sname = by_tensor[p["tensor"]]
                q0 = part_view(base[name], p).reshape(shape)
                s0 = base_scale[sname].reshape(shape[0])
                q, sc = merged_fp8(q0, s0, a_name, b_name, step)
                part_view(want[name], p)[...] = q.reshape(p["local_shape"])
                want_scale[sname][...] = sc
                adapted += 1
        if rank == GENERATOR:
            check(adapted == 7 * LLAMA["num_hidden_layers"], "step %d: %d adapted weights" % (step, adapted))
            check(any(not np.array_equal(want[k], base[k]) for k in want), "step %d: the reference changes nothing" % step)
        for k in dst:
            bad = np.flatnonzero(dst[k].view(np.uint8) != want[k].view(np.uint8))
            if len(bad):
                fail("step %d, buffer %s: %d of %d bytes differ from the reference; first at byte %d" %
                     (step, k, len(bad), dst[k].nbytes, bad[0]))
        for k in scale:
            bad = np.flatnonzero(scale[k].view(np.uint32) != want_scale[k].view(np.uint32))
            if len(bad):
                i = bad[0]
                fail("step %d, scales %s: %d of %d differ from the reference; first %d: %r, want %r" %
                     (step, k, len(bad), scale[k].size, i, scale[k][i], want_scale[k][i]))
    for x in (ad, m):
        x.close()


s.close()
remove_config(path)
finish()
