"""m2n against plain mpi4py baselines, one tensor, in one 8-rank job.

Trainer ranks 0-3 hold a float32 [ROWS, COLS] tensor as row shards
(Shard(0)); generator ranks 4-7 want it as DP2 x TP2 [Replicate, Shard(1)]
(each holds half the columns: a change of shard dim and 2x replication), or
with --dst tp4 as [Shard(1)] over 4 ranks.

  scripts/mpirun.sh -np 8 /usr/bin/python3 bench/peers/mpi4py_reshard.py [--mib 128] [--dst dp2tp2|tp4] [--iters 5]

(from the repository root, after `make capi`: it loads python/m2n and
dist/libm2n.so from this checkout unless M2N_LIBRARY names another).

Methods, interleaved each iteration so that they share the noise:
  gather+send  the trainers Allgather the whole tensor, then trainer i copies
               generator 4+i's columns into a contiguous buffer and Sends it
  p2p          each trainer Isends each generator the box it needs (a
               contiguous copy of rows_i x cols_j), the generator Irecvs each
               box straight into its row range: what flat does, by hand
  p2p vector   the same with an MPI vector datatype: the box sent in place,
               no copy (what m2n's MPI transport does)
  m2n flat / m2n hier / m2n auto   Session.prepare(...).run(...)
An iteration's time is the slowest rank's from a barrier; the median of the
timed iterations is printed, after one warm-up iteration each, with its
ratio to p2p and the bandwidth ratio of the vector exchange to it (m2n's
target: flat at least 0.95). Every method's destination is checked once
against the global tensor.
"""
import argparse
import os
import statistics
import sys

_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
sys.path.insert(0, os.path.join(_root, "python"))
os.environ.setdefault("M2N_LIBRARY", os.path.join(_root, "dist", "libm2n.so"))

from mpi4py import MPI
import numpy as np

import m2n
from m2n import Replicate as R, Shard as S

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=128)
ap.add_argument("--dst", default="dp2tp2", choices=["dp2tp2", "tp4"])
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--routes", default="flat,hier,auto")
ap.add_argument("--skip", default="", help="peer methods to leave out, e.g. gather+send,p2p (p2p vector always runs)")
ap.add_argument("--trace", action="store_true")
ap.add_argument("--chunk-mib", type=int, default=0, help="Session chunk_bytes, staging 8x (0: the defaults)")
args = ap.parse_args()
comm = MPI.COMM_WORLD
rank = comm.rank
assert comm.size == 8
COLS = 4096
ROWS = args.mib * 2 ** 20 // 4 // COLS
NT, NG = 4, 4
trainer = m2n.Mesh(range(4))
if args.dst == "dp2tp2":
    generator, gpl, ncolshards = m2n.Mesh([[4, 5], [6, 7]]), [R(), S(1)], 2
else:
    generator, gpl, ncolshards = m2n.Mesh([4, 5, 6, 7]), [S(1)], 4
RB, CB = ROWS // NT, COLS // ncolshards


def col_shard(g):  # the column shard generator rank g holds
    return (g - 4) % ncolshards


# the global tensor, each rank's piece of it (never built whole except to check)
def rows_of(i):
    return (np.arange(i * RB, (i + 1) * RB, dtype=np.float32)[:, None] * COLS +
            np.arange(COLS, dtype=np.float32)[None, :]) % np.float32(16777216)


is_src, is_dst = rank < NT, rank >= NT
mine = rows_of(rank) if is_src else None
out = np.empty((ROWS, CB), np.float32) if is_dst else None
want = None
if is_dst:
    c = col_shard(rank)
    want = np.concatenate([rows_of(i)[:, c * CB:(c + 1) * CB] for i in range(NT)])

tcomm = comm.Split(0 if is_src else 1, rank)
full = np.empty((ROWS, COLS), np.float32) if is_src else None


def gather_send():
    if is_src:
        tcomm.Allgather(mine, full)
        g = 4 + rank
        comm.Send(np.ascontiguousarray(full[:, col_shard(g) * CB:(col_shard(g) + 1) * CB]), dest=g, tag=1)
    else:
        comm.Recv(out, source=rank - 4, tag=1)


def p2p():
    reqs, keep = [], []
    if is_src:
        for g in range(4, 8):
            c = col_shard(g)
            b = np.ascontiguousarray(mine[:, c * CB:(c + 1) * CB])
            keep.append(b)
            reqs.append(comm.Isend(b, dest=g, tag=2))
    else:
        for i in range(NT):
            reqs.append(comm.Irecv(out[i * RB:(i + 1) * RB], source=i, tag=2))
    MPI.Request.Waitall(reqs)


VEC = MPI.FLOAT.Create_vector(RB, CB, COLS).Commit()  # rows_i x cols_j in place


def p2p_dtype():
    reqs = []
    if is_src:
        for g in range(4, 8):
            reqs.append(comm.Isend([mine.reshape(-1)[col_shard(g) * CB:], 1, VEC], dest=g, tag=3))
    else:
        for i in range(NT):
            reqs.append(comm.Irecv(out[i * RB:(i + 1) * RB], source=i, tag=3))
    MPI.Request.Waitall(reqs)


methods = [(n, f) for n, f in [("gather+send", gather_send), ("p2p", p2p), ("p2p vector", p2p_dtype)]
           if n == "p2p vector" or n not in args.skip.split(",")]
s = m2n.Session(comm, timeout=120, chunk_bytes=args.chunk_mib << 20, staging_bytes=8 * args.chunk_mib << 20)
t = m2n.Tensor("w", (ROWS, COLS), "float32", src=(trainer, [S(0)]), dst=(generator, gpl))
for route in args.routes.split(","):
    call = s.prepare([t], route=route)
    if rank == 0:
        print("m2n %s: %s" % (route, {k: v for k, v in call.describe().items() if k in ("route", "note", "rounds")}),
              flush=True)
    methods.append(("m2n " + route, (lambda c: lambda: c.run(src={"w": mine} if is_src else None,
                                                              dst={"w": out} if is_dst else None))(call)))

times = {name: [] for name, _ in methods}
for it in range(args.iters + 1):
    for name, fn in methods:
        if is_dst:
            out[...] = -1
        comm.Barrier()
        t0 = MPI.Wtime()
        if rank == 0 and args.trace:
            print("it", it, name, flush=True)
        fn()
        dt = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
        if it == 0:
            ok = comm.allreduce(bool(np.array_equal(out, want)) if is_dst else True, op=MPI.LAND)
            if rank == 0:
                print("%-12s check %s" % (name, "passed" if ok else "FAILED"), flush=True)
        else:
            times[name].append(dt)
s.close()
if rank == 0:
    base = statistics.median(times["p2p"] if "p2p" in times else times["p2p vector"])
    vec = statistics.median(times["p2p vector"])
    print("\n%d MiB float32 %dx%d, trainer 4 S0 -> generator %s, median of %d (ms; min, max), ratio to p2p (to p2p vector when p2p is skipped), "
          "bandwidth as a share of p2p vector's" % (args.mib, ROWS, COLS, args.dst, args.iters))
    for name, ts in times.items():
        med = statistics.median(ts)
        print("  %-12s %8.1f ms  (%.1f, %.1f)  x%.2f  %4.0f%% of vector  %.2f GB/s of tensor" % (
            name, med * 1e3, min(ts) * 1e3, max(ts) * 1e3, med / base, 100 * vec / med, args.mib * 2 ** 20 / med / 1e9))
