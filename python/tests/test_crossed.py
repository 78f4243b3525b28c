"""Calls interleaved on purpose (mpirun -np 4): two calls of one session
with the same layout and tensor name (a 160x120 int32 "w", 19,200
elements, from ranks 0-1 in rows to ranks 2-3 in columns), told apart
only by the order they were prepared in. The sources run a then b while
the destinations run b then a: both steps raise m2n.CallMismatchError on
every rank, naming both calls, with every destination element untouched;
in the same order afterwards each call delivers its own data. Then two
threads per rank run one call each (which m2n allows): every step either
delivers its own call's data to every element or raises
CallMismatchError with the destination untouched, and every rank
completes the same steps of each call. Never the other call's data."""

import threading

import numpy as np

from harness import case, check, comm, fail, finish, m2n, rank

assert comm.size == 4, "run with mpirun -np 4"

ROWS, COLS = 160, 120
side = "src" if rank < 2 else "dst"
t = m2n.Tensor("w", (ROWS, COLS), "int32", src=(m2n.Mesh([0, 1]), [m2n.Shard(0)]),
               dst=(m2n.Mesh([2, 3]), [m2n.Shard(1)]))
shape, offset, _ = t.part(side, rank)
index = (np.arange(shape[0])[:, None] + offset[0]) * COLS + np.arange(shape[1])[None, :] + offset[1]


def value(k, step):
    """Call k's step: (k+1)*10^7 + (step % 50)*200000 + global index."""
    return ((k + 1) * 10000000 + (step % 50) * 200000 + index).astype(np.int32)


class Step:
    """One call's state on this rank: its completed steps (the next step
    is done + 1 on every rank)."""

    def __init__(self, call, k):
        self.call, self.k, self.done, self.mismatches = call, k, 0, 0

    def run(self, what):
        """Runs one step; returns "ok" or "mismatch", recording a failure for
        anything else or any wrong element."""
        step = self.done + 1
        buf = value(self.k, step) if side == "src" else np.full(shape, -1, np.int32)
        try:
            rep = self.call.run(**{side: {"w": buf}})
        except m2n.CallMismatchError as e:
            self.mismatches += 1
            msg = str(e)
            check(msg.count("call #") == 2 and "ranks run different steps" in msg and e.call and e.want,
                  "%s: the mismatch does not name both calls: %s (%s)" % (what, msg, e.detail))
            if side == "dst":
                changed = int(np.count_nonzero(buf != -1))
                check(changed == 0, "%s: CallMismatchError, but %d of %d destination elements changed" %
                      (what, changed, buf.size))
            return "mismatch", e
        except m2n.Error as e:
            fail("%s: %s: %s" % (what, type(e).__name__, e))
            return "error", e
        self.done += 1
        check(rep["completed"] == ["w"], "%s: report %s" % (what, rep))
        if side == "dst":
            want = value(self.k, step)
            wrong = int(np.count_nonzero(buf != want))
            other = int(np.count_nonzero((buf // 10000000 != self.k + 1) & (buf % 200000 == index)))
            check(wrong == 0, "%s: %d of %d elements wrong, %d of them the other call's data" %
                  (what, wrong, buf.size, other))
        return "ok", None


s = m2n.Session(comm, timeout=30, verify=True, atomic=True)
calls = [Step(s.prepare([t], route="hier"), 0), Step(s.prepare([t], route="hier"), 1)]


@case("sources run a then b, destinations b then a: CallMismatchError on every rank naming both calls, "
      "destinations untouched; then in the same order, each call's own data")
def _():
    order = "ab" if side == "src" else "ba"
    for i, c in enumerate(order):
        got, e = calls[ord(c) - ord("a")].run("crossed run %d (call %s)" % (i, c))
        check(got == "mismatch", "crossed run %d (call %s): %s, want CallMismatchError" % (i, c, got))
        if e is not None and got == "mismatch":
            check(e.rank == 2 and e.differing == [2, 3], "crossed run %d: rank %s, differing %s" %
                  (i, e.rank, e.differing))
            if rank == 0 and i == 0:
                print("rank 0: %s: %s" % (type(e).__name__, e), flush=True)
    for i, c in enumerate("ab"):
        got, _ = calls[ord(c) - ord("a")].run("run %d in order (call %s)" % (i, c))
        check(got == "ok", "run %d in order (call %s): %s" % (i, c, got))


@case("two threads per rank, one call each, 6 steps: own data or CallMismatchError, never the other call's")
def _():
    outcomes = {0: [], 1: []}

    def worker(k):
        for i in range(6):
            outcomes[k].append(calls[k].run("thread %d run %d" % (k, i))[0])

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k in (0, 1):
        check(all(o in ("ok", "mismatch") for o in outcomes[k]), "thread %d outcomes %s" % (k, outcomes[k]))
    done = [c.done for c in calls]
    every = comm.allgather(done)
    check(all(d == done for d in every), "completed steps per call differ between ranks: %s" % every)
    if rank == 0:
        print("threads: completed steps per call %s, mismatches %s" % (done, [c.mismatches for c in calls]),
              flush=True)


for c in calls:
    c.call.close()
s.close()
finish()
