"""A PyTorch trainer handing its weights to generator ranks every step, with
m2n (mpirun -np 8 python3 trainer_torch.py [--device cuda]).

The first half of the ranks train: each holds its tensor-parallel shards of
a small transformer-like model (vocab-parallel embedding, column-parallel
q_proj and gate_up, row-parallel o_proj, a replicated norm, experts over
EP), as DTensor would place them with Shard(d) and Replicate(). The other
half generate, as DP x TP replicas: they want the same weights laid out
their own way, [Replicate(), Shard(d)]. Every step the trainer updates its
weights and m2n moves them, straight from each trainer shard to the
generator shards that overlap it, on the hierarchical route. The generator
checks every element against the weights it can recompute (the "training"
here is deterministic). With --device cuda every rank uses the GPU of its
local rank and the tensors move over NCCL.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))

from mpi4py import MPI  # noqa: E402  (initialises MPI)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import m2n  # noqa: E402
from m2n import Replicate, Shard  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()

comm = MPI.COMM_WORLD
rank, world = comm.rank, comm.size
if args.device == "cuda":
    torch.cuda.set_device(comm.Split_type(MPI.COMM_TYPE_SHARED).rank)  # the local rank's GPU
device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")

# Who trains and who generates: the first half trains (TP over all of
# them), the rest generate as DP x TP2 (one rank: it does both).
M = max(1, world // 2)
G = world - M if world > 1 else 1
TP = 2 if G % 2 == 0 else 1
trainer = m2n.Mesh(range(0, M))
generator = m2n.Mesh(range(world - G, world), shape=(G // TP, TP))


class RMSNorm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))


class Block(nn.Module):
    def __init__(self, vocab=512, hidden=64, inter=128, experts=4):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * inter, bias=False)
        self.norm = RMSNorm(hidden)
        self.experts = nn.Parameter(torch.randn(experts, inter, hidden))


# How each weight is placed: on the trainer (one placement, TP over M) and
# on the generator ([DP, TP]).
PLACEMENT = {
    "embed_tokens.weight": ([Shard(0)], [Replicate(), Shard(0)]),  # vocab-parallel
    "q_proj.weight": ([Shard(0)], [Replicate(), Shard(0)]),        # column-parallel
    "o_proj.weight": ([Shard(1)], [Replicate(), Shard(1)]),        # row-parallel
    "gate_up.weight": ([Shard(0)], [Replicate(), Shard(0)]),
    "norm.weight": ([Replicate()], [Replicate(), Replicate()]),    # replicated
    "experts": ([Shard(0)], [Replicate(), Shard(0)]),              # experts over EP
}


def weights(step):
    """Every weight of the model after step training steps, in full: the
    same on every rank (a seeded init, then deterministic updates)."""
    torch.manual_seed(0)
    model = Block().to(torch.bfloat16)
    with torch.no_grad():
        for s in range(step + 1):
            for p in model.parameters():
                p.mul_(0.5).add_(0.01 * (s + 1))
    return {name: p.detach() for name, p in model.named_parameters()}


full = weights(0)
tensors = [m2n.Tensor(name, tuple(p.shape), p.dtype, src=(trainer, PLACEMENT[name][0]),
                      dst=(generator, PLACEMENT[name][1])) for name, p in full.items()]


def local(t, side, w):
    """This rank's shard of a full weight, as DTensor would hold it."""
    shape, offset, _ = t.part(side, rank)
    idx = tuple(slice(o, o + n) for o, n in zip(offset, shape))
    return w[t.name][idx].contiguous().to(device)


with m2n.Session(comm, device=args.device, dst_domain_size=max(1, G // 2)) as s:
    call = s.prepare(tensors, route="hier")  # validate, plan, schedule, agree: once
    # The generator's buffers: allocated once, written by every step.
    mine = {t.name: torch.empty(t.local_shape("dst", rank), dtype=torch.bfloat16, device=device)
            for t in tensors if rank in t.dst.mesh}
    for step in range(args.steps):
        w = weights(step)  # this step's trained weights
        src = {t.name: local(t, "src", w) for t in tensors if rank in t.src.mesh}
        report = call.run(src=src, dst=mine)  # hand them to the generator
        for t in tensors:
            if t.name in mine and not torch.equal(mine[t.name], local(t, "dst", w)):
                raise SystemExit("rank %d: step %d: %s differs from the trainer's" % (rank, step, t.name))
        if rank == 0:
            print("step %d: %d tensors in %.2f ms (%d rounds)" % (step, len(report["completed"]),
                                                                    1e3 * report["seconds"], report["rounds"]))
if rank == 0:
    print("%d steps of %d tensors from a %d-rank trainer to a %dx%d generator on %s, every element checked" %
          (args.steps, len(tensors), M, G // TP, TP, args.device))
