"""A trainer handing its weights to generator ranks every step with numpy
only (mpirun -np 8 python3 trainer_numpy.py): the same as trainer_torch.py
with numpy arrays, and as examples/trainer (Go) from Python.

Ranks 0-3 train, each holding its shards of six tensors of different
layouts (vocab-parallel, column- and row-parallel, a replicated norm,
experts over EP); ranks 4-7 generate as DP2 x TP2 and want them as
[Replicate(), Shard(d)]. Every step the trainer changes its weights and m2n
moves them on the hierarchical route, the generator as 2 emulated domains;
the generator checks every element. bf16 weights travel as their raw bits
(numpy has no bfloat16: uint16 arrays stand for them).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))

from mpi4py import MPI  # noqa: E402  (initialises MPI)
import numpy as np  # noqa: E402

import m2n  # noqa: E402
from m2n import Replicate, Shard  # noqa: E402

comm = MPI.COMM_WORLD
rank = comm.rank
if comm.size != 8:
    raise SystemExit("run with mpirun -np 8")
trainer = m2n.Mesh(range(0, 4))           # ranks 0-3
generator = m2n.Mesh([[4, 5], [6, 7]])    # ranks 4-7: DP2 x TP2

model = [  # name, shape, dtype, trainer placements, generator placements
    ("embed_tokens.weight", (1024, 64), "bfloat16", [Shard(0)], [Replicate(), Shard(0)]),
    ("layers.0.self_attn.q_proj.weight", (256, 64), "bfloat16", [Shard(0)], [Replicate(), Shard(0)]),
    ("layers.0.self_attn.o_proj.weight", (64, 256), "bfloat16", [Shard(1)], [Replicate(), Shard(1)]),
    ("layers.0.input_layernorm.weight", (64,), "float32", [Replicate()], [Replicate(), Replicate()]),
    ("layers.0.mlp.experts.down_proj", (8, 64, 128), "bfloat16", [Shard(0)], [Replicate(), Shard(0)]),
    ("lm_head.weight", (1024, 64), "bfloat16", [Shard(0)], [Replicate(), Shard(0)]),
]
tensors = [m2n.Tensor(name, shape, dtype, src=(trainer, tp), dst=(generator, gp))
           for name, shape, dtype, tp, gp in model]
NUMPY = {"bfloat16": np.uint16, "float32": np.float32}


def weights(t, step):
    """Tensor t's full weights after step steps: a pattern every rank can
    compute (the trainer's "training")."""
    n = int(np.prod(t.shape))
    return ((np.arange(n) * 31 + step * 7 + len(t.name)) % 65521).astype(NUMPY[t.dtype]).reshape(t.shape)


def shard(t, side, w):
    shape, offset, _ = t.part(side, rank)
    return np.ascontiguousarray(w[tuple(slice(o, o + n) for o, n in zip(offset, shape))])


with m2n.Session(comm, dst_domain_size=2) as s:
    call = s.prepare(tensors, route="hier")  # once
    mine = call.empty("dst")                 # the generator's buffers, by name
    for step in range(3):
        src = {t.name: shard(t, "src", weights(t, step)) for t in tensors if rank in t.src.mesh}
        report = call.run(src=src, dst=mine)  # this step's weights to the generator
        for t in tensors:
            if t.name in mine and not np.array_equal(mine[t.name], shard(t, "dst", weights(t, step))):
                raise SystemExit("rank %d: step %d: %s differs from the trainer's" % (rank, step, t.name))
    if rank == 0:
        print("3 steps of %d tensors checked on every generator rank (route %s)" % (len(tensors), call.describe()["route"]))
