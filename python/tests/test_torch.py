"""Calls from Python with torch tensors (mpirun -np N, N >= 1; --cuda for
CUDA tensors, one GPU per rank, each rank on its local rank's GPU): bf16,
f32 and i64 tensors from the first half of the ranks to the second (one
rank: to itself, other layouts), two of them placed in one fused
destination buffer through views; every element checked; a non-contiguous
tensor, a tensor of another dtype and (on CUDA) a host tensor raise the
same ValidationError on every rank, naming the rank; on CUDA, a source
written on a side stream is moved only once that stream's work is done;
a bf16 tensor converted to FP8 in flight (on GPUs by the quantize-pack
kernels), every byte and scale checked."""

import sys

from harness import ENCODE, as_dtype, case, check, comm, e4m3_values, expect, fail, finish, m2n, pattern, rank, size

import numpy as np
import torch

CUDA = "--cuda" in sys.argv
if CUDA:
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).rank
    torch.cuda.set_device(local)
    dev = torch.device("cuda", torch.cuda.current_device())
else:
    dev = torch.device("cpu")

S, R = m2n.Shard, m2n.Replicate
half = max(1, size // 2)
trainer = m2n.Mesh(range(0, half))
generator = m2n.Mesh(range(size - half, size)) if size > 1 else m2n.Mesh([0])
TORCH = {"bfloat16": torch.bfloat16, "float32": torch.float32, "int64": torch.int64}
INT = {2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}
Q, K = (8 * half, 16), (4 * half, 16)  # rows shard over the generator, fused as [q; k] per rank

ts = [
    m2n.Tensor("w1", (6 * half, 10), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [S(1)])),
    m2n.Tensor("w2", (5, 3 * half + 1), "float32", src=(trainer, [S(1)]), dst=(generator, [R()])),
    m2n.Tensor("q", Q, "int64", src=(trainer, [R()]), dst=(generator, [S(0)]), dst_view=(0, None)),
    m2n.Tensor("k", K, "int64", src=(trainer, [S(0)]), dst=(generator, [S(0)]), dst_view=(Q[0] // half * 16, None)),
]


def global_tensor(i, t, step):
    item = torch.empty((), dtype=TORCH[t.dtype]).element_size()
    g = pattern(t.shape, item, i, step).view(INT[item][0])
    return torch.from_numpy(g).view(TORCH[t.dtype])


def sub(g, off, shape):
    return g[tuple(slice(o, o + n) for o, n in zip(off, shape))]


def sources(step, stream=None):
    out = {}
    for i, t in enumerate(ts):
        p = t.part("src", rank)
        if p is not None:
            x = sub(global_tensor(i, t, step), p[1], p[0]).contiguous()
            if stream is None:
                out[t.name] = x.to(dev)
            else:
                y = torch.empty(x.shape, dtype=x.dtype, device=dev)
                big = torch.ones(1 << 22, device=dev)
                with torch.cuda.stream(stream):
                    for _ in range(20):  # keep the side stream busy, then write
                        big.mul_(1.0001)
                    y.copy_(x.to(dev, non_blocking=True))
                out[t.name] = y
    return out


def destinations():
    out = {}
    for t in ts[:2]:
        shape = t.local_shape("dst", rank)
        if shape is not None:
            out[t.name] = torch.full(shape, -7, dtype=TORCH[t.dtype], device=dev)
    q, k = ts[2].local_shape("dst", rank), ts[3].local_shape("dst", rank)
    if q is not None:
        fused = torch.full((q[0] + k[0], 16), -7, dtype=torch.int64, device=dev)
        out["q"] = out["k"] = fused  # one buffer, two views
    return out


def verify(dst, step):
    for i, t in enumerate(ts):
        p = t.part("dst", rank)
        if p is None:
            continue
        got = dst[t.name].cpu()
        if t.name in ("q", "k"):
            qrows = ts[2].local_shape("dst", rank)[0]
            got = got[:qrows] if t.name == "q" else got[qrows:]
        want = sub(global_tensor(i, t, step), p[1], p[0])
        item = got.element_size()
        g, w = got.view(INT[item][1]).numpy(), want.contiguous().view(INT[item][1]).numpy()
        bad = np.argwhere(g != w)
        if len(bad):
            k = tuple(bad[0])
            fail("tensor %s step %d: %d of %d wrong, first at %s: %d, want %d" % (t.name, step, len(bad), g.size, k,
                                                                                 g[k], w[k]))


s = m2n.Session(comm, device="cuda" if CUDA else "cpu", timeout=120)
call = s.prepare(ts, route="hier")


@case("torch %s tensors, %d ranks: 2 steps, views into a fused buffer, every element" % (dev.type, size))
def _():
    for step in range(2):
        dst = destinations()
        rep = call.run(src=sources(step), dst=dst)
        check(rep["completed"] == [t.name for t in ts], "report %s" % rep)
        verify(dst, step)


bad = size - 1 if size > 1 else 0


@case("a non-contiguous torch tensor on rank %d: ValidationError on every rank" % bad)
def _():
    src, dst = sources(0), destinations()
    if rank == bad and "w1" in dst:
        dst["w1"] = torch.empty(tuple(reversed(dst["w1"].shape)), dtype=torch.bfloat16, device=dev).T
    elif rank == bad:
        src["w1"] = torch.empty(tuple(reversed(src["w1"].shape)), dtype=torch.bfloat16, device=dev).T
    e = expect(m2n.ValidationError, call.run, src=src, dst=dst)
    if e is not None:
        check(e.rank == bad and "not contiguous" in str(e) and "w1" in str(e), "error %s" % e)


@case("a torch tensor of the right size but transposed on rank %d: ValidationError on every rank, naming the shapes" % bad)
def _():
    src, dst = sources(0), destinations()
    side = "dst" if "w1" in dst else "src"
    bufs = dst if side == "dst" else src
    want = tuple(bufs["w1"].shape)
    if rank == bad:
        bufs["w1"] = bufs["w1"].T.contiguous()
    e = expect(m2n.ValidationError, call.run, src=src, dst=dst)
    if e is not None and rank == bad:
        check(e.rank == bad and "w1" in str(e) and "has shape (%d, %d)" % (want[1], want[0]) in str(e) and
              "this rank's part is (%d, %d)" % want in str(e), "error %s" % e)


@case("a torch tensor of another dtype on rank 0: ValidationError on every rank")
def _():
    src, dst = sources(0), destinations()
    if rank == 0:
        src["w2"] = src["w2"].to(torch.float64)
    e = expect(m2n.ValidationError, call.run, src=src, dst=dst)
    if e is not None:
        check(e.rank == 0 and "dtype f64" in str(e), "error %s" % e)


if CUDA:
    @case("a host tensor in a CUDA session on rank 0: ValidationError on every rank")
    def _():
        src, dst = sources(0), destinations()
        if rank == 0:
            src["w2"] = src["w2"].cpu()
        e = expect(m2n.ValidationError, call.run, src=src, dst=dst)
        if e is not None:
            check(e.rank == 0 and "host memory" in str(e), "error %s" % e)

    @case("sources written on a busy side stream: the step waits for it")
    def _():
        side = torch.cuda.Stream()
        dst = destinations()
        side.wait_stream(torch.cuda.current_stream())  # the destinations' fill comes first
        call.run(src=sources(7, stream=side), dst=dst, stream=side)
        verify(dst, 7)


@case("FP8 in flight on torch %s tensors: bf16 to float8_e4m3fn, every byte and block scale" % dev.type)
def _():
    t = m2n.Tensor("w8", (256, 128 * half), "bfloat16", src=(trainer, [S(0)]), dst=(generator, [S(1)]),
                   dst_dtype="float8_e4m3fn", scale="block")
    full = e4m3_values(t.shape, "block", 11)
    with s.prepare([t]) as c8:
        src, dst, scale = {}, {}, {}
        p = t.part("src", rank)
        if p is not None:
            bits = as_dtype(full[tuple(slice(o, o + n) for o, n in zip(p[1], p[0]))], "bfloat16").view(np.int16)
            src["w8"] = torch.from_numpy(np.ascontiguousarray(bits)).view(torch.bfloat16).to(dev)
        q = t.part("dst", rank)
        if q is not None:
            dst["w8"] = torch.zeros(q[0], dtype=getattr(torch, "float8_e4m3fn", torch.uint8), device=dev)
            scale["w8"] = torch.full(t.scale_part(rank)[0], -1.0, dtype=torch.float32, device=dev)
        c8.run(src=src, dst=dst, scale=scale)
        if q is not None:
            want = np.vectorize(ENCODE.__getitem__, otypes=[np.uint8])(full[tuple(slice(o, o + n) for o, n in zip(q[1], q[0]))])
            got = dst["w8"].view(torch.uint8).cpu().numpy()
            check(np.array_equal(got, want), "%d of %d FP8 bytes wrong" % (np.count_nonzero(got != want), got.size))
            check(bool(torch.all(scale["w8"] == 1.0)), "scales %s, want all 1" % scale["w8"].cpu().ravel()[:8])


@case("the session is usable after the errors")
def _():
    dst = destinations()
    call.run(src=sources(9), dst=dst)
    verify(dst, 9)


call.close()
s.close()
finish()
