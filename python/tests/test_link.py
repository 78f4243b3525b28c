"""Two jobs, one session (two mpiruns given --ompi-server, -np 2 each):
`test_link.py listen PATH` is the trainer (m2n.Session.listen), holding a
12x8 float32 matrix by rows on session ranks 0-1; `test_link.py connect
PATH`, started once PATH exists, is the generator (m2n.Session.connect),
wanting it by columns on session ranks 2-3. The generator first tries a
port file that does not exist (ValidationError naming it). Two steps,
every element checked; each job's rank 0 prints its own result line."""

import sys

import numpy as np

from harness import box, case, check, comm, expect, finish, m2n, pattern

role, path = sys.argv[1], sys.argv[2]
assert role in ("listen", "connect") and comm.size == 2, "run as: mpirun -np 2 test_link.py listen|connect PATH"

if role == "connect":
    @case("a missing port file: ValidationError naming it")
    def _():
        e = expect(m2n.ValidationError, m2n.Session.connect, comm, path + ".missing", timeout=30)
        if e is not None:
            check("missing does not exist" in str(e), "error %s" % e)

join = m2n.Session.listen if role == "listen" else m2n.Session.connect
s = join(comm, path, timeout=30)


@case("joined: the trainer's ranks first")
def _():
    check(s.size == 4 and (s.rank < 2) == (role == "listen"), "rank %d of %d" % (s.rank, s.size))


t = m2n.Tensor("w", (12, 8), "float32", src=(m2n.Mesh([0, 1]), [m2n.Shard(0)]), dst=(m2n.Mesh([2, 3]), [m2n.Shard(1)]))
call = s.prepare([t], route="flat")


@case("two steps, every element checked")
def _():
    for step in range(2):
        g = pattern(t.shape, 4, 0, step)
        src, dst = {}, {}
        p, q = t.part("src", s.rank), t.part("dst", s.rank)
        if p is not None:
            src["w"] = np.ascontiguousarray(box(g, p[1], p[0])).view(np.float32)
        if q is not None:
            dst["w"] = np.full(q[0], 0xAAAAAAAA, np.uint32).view(np.float32)
        call.run(src=src, dst=dst)
        if q is not None:
            want = np.ascontiguousarray(box(g, q[1], q[0]))
            check(np.array_equal(dst["w"].view(np.uint32), want), "step %d: wrong elements on rank %d" % (step, s.rank))


call.close()
s.close()
finish()
