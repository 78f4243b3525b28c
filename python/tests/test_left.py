"""A rank that leaves early (mpirun -np 3; the mode is argv[1]). Every
session waits at most 120 s, so a peer that waited it out would show; the
Go test (TestPythonLeft) bounds the job to seconds and reads the lines
printed here.

  raise:  rank 1 raises (uncaught) after preparing, before its run, while
          ranks 0 and 2 run the step: the package prints rank 1's traceback
          once with its rank, leaves the session and ends the job
          (MPI_Abort); ranks 0 and 2 raise m2n.LeftError naming rank 1 and
          the exception at once.
  with:   the same from inside `with m2n.Session(...)`.
  closed: rank 1 closes the call and then runs it: it raises
          InvalidArgument, and ranks 0 and 2, in that step, raise LeftError
          naming rank 1 and what it did.
  unclosed: rank 1's program ends after a step without closing its
          session; ranks 0 and 2, running another step, raise LeftError
          naming rank 1 ("its program ended with the session open").

In closed and unclosed every rank finishes the first step before rank 1
leaves (an MPI barrier): a rank still finishing a collective the leaver
took part in is not disturbed by the leaver itself, but it can be by the
abort notice of a third rank that already met the leaver's absence (seen
under load: rank 0, slow to see its last step complete, raised there)."""

import sys
import time

import numpy as np

from harness import comm, m2n, rank

assert comm.size == 3, "run with mpirun -np 3"
mode = sys.argv[1]
t = m2n.Tensor("w", (4, 4), "float32", src=(m2n.Mesh([0]), ["R"]), dst=(m2n.Mesh([1, 2]), ["S0"]))
src = {"w": np.arange(16, dtype=np.float32).reshape(4, 4)} if rank == 0 else {}
dst = {"w": np.zeros((2, 4), np.float32)} if rank > 0 else {}
start = time.monotonic()


def peer_step(s, call):
    """A peer's step: it must raise LeftError naming rank 1 within seconds."""
    try:
        call.run(src=src, dst=dst)
    except m2n.LeftError as e:
        print("rank %d: LeftError after %.1f s: %s" % (rank, time.monotonic() - start, e), flush=True)
        print("rank %d: detail rank=%s cause=%s" % (rank, e.rank, e.detail.get("cause")), flush=True)
        s.close()
        return
    print("rank %d: the step did not raise LeftError" % rank, flush=True)


def first_step():
    """A session and its call after one step that every rank has finished
    (see the module docstring) before rank 1 leaves."""
    s = m2n.Session(comm, timeout=120)
    call = s.prepare([t])
    call.run(src=src, dst=dst)
    comm.Barrier()  # every rank is done with that step
    return s, call


if mode in ("raise", "with"):
    def body(s):
        call = s.prepare([t])
        if rank == 1:
            comm.Barrier()  # the peers are about to run
            time.sleep(0.5)
            print("rank 1: raising", flush=True)
            1 / 0
        comm.Barrier()
        peer_step(s, call)
        time.sleep(30)  # the job ends before this does (rank 1's MPI_Abort)

    if mode == "with":
        with m2n.Session(comm, timeout=120) as s:
            body(s)
    else:
        body(m2n.Session(comm, timeout=120))
elif mode == "closed":
    s, call = first_step()
    if rank == 1:
        call.close()
        try:
            call.run(src=src, dst=dst)
        except m2n.InvalidArgument as e:
            print("rank 1: InvalidArgument: %s" % e, flush=True)
    else:
        peer_step(s, call)
elif mode == "unclosed":
    s, call = first_step()
    if rank == 1:
        print("rank 1: ending without closing the session", flush=True)
    else:
        peer_step(s, call)
else:
    raise SystemExit("mode %r: want raise, with, closed or unclosed" % mode)
