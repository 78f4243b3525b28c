"""A rank that never comes (mpirun -np 3): ranks 0 and 1 run a step with a
2 s timeout while rank 2 sleeps; both raise m2n.TimeoutError (an
AbortError) naming rank 2 among the ranks they waited for, the session
reports that it aborted, and rank 2, arriving late, raises AbortError. At
exit the package ends the job (MPI_Abort) rather than let MPI_Finalize wait,
so the job exits non-zero: the Go test checks the lines printed here."""

import time

import numpy as np

from harness import case, check, comm, expect, finish, m2n, rank

assert comm.size == 3, "run with mpirun -np 3"

t = m2n.Tensor("w", (4, 4), "float32", src=(m2n.Mesh([0]), ["R"]), dst=(m2n.Mesh([1, 2]), ["S0"]))
s = m2n.Session(comm, timeout=2)
call = s.prepare([t])
src = {"w": np.zeros((4, 4), np.float32)} if rank == 0 else {}
dst = {"w": np.zeros((2, 4), np.float32)} if rank > 0 else {}


@case("a rank that never comes: TimeoutError naming it on the others, AbortError on it")
def _():
    if rank == 2:
        time.sleep(5)
        e = expect(m2n.AbortError, call.run, src=src, dst=dst)
    else:
        e = expect(m2n.TimeoutError, call.run, src=src, dst=dst)
        if e is not None:
            check(2 in (e.detail.get("peers") or []) and "TimeoutError" in e.chain, "error %s (%s)" % (e, e.detail))
    check(s.aborted, "the session did not abort")
    if e is not None:
        print("rank %d: %s: %s" % (rank, type(e).__name__, e), flush=True)


s.close()
finish()
