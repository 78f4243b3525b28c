"""A small harness for the MPI-launched Python tests: every rank runs the
same cases in order; a failing check is recorded, not raised, so the ranks
stay in step; at the end the ranks gather their failures and every rank
exits non-zero if any rank failed. Rank 0 prints one line per case."""

import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from mpi4py import MPI  # noqa: E402  (initialises MPI, MPI_THREAD_MULTIPLE)
import numpy as np  # noqa: E402

import m2n  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
_failures = []
_case = ["-"]


def fail(msg):
    _failures.append("rank %d, case %s: %s" % (rank, _case[0], msg))


def check(cond, msg):
    if not cond:
        fail(msg)
    return bool(cond)


def case(name):
    """Decorates a case: runs it at once, recording an exception as a
    failure, then waits for every rank (so cases do not overlap)."""

    def run(fn):
        _case[0] = name
        before = len(_failures)
        try:
            fn()
        except Exception:
            fail("raised:\n" + traceback.format_exc())
        comm.Barrier()
        bad = comm.allreduce(len(_failures) - before)
        if rank == 0:
            print("%s %s" % ("FAIL" if bad else "ok  ", name), flush=True)
        return fn

    return run


def expect(exc, fn, *args, **kwargs):
    """Runs fn and returns the exception of class exc it raises (recording
    a failure if it raises another or none)."""
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    except Exception as e:
        fail("want %s, got %s: %s" % (exc.__name__, type(e).__name__, e))
        return None
    fail("want %s, got no error" % exc.__name__)
    return None


def finish():
    """Gathers every rank's failures; exits 1 on any."""
    every = comm.gather(_failures, root=0)
    bad = comm.bcast(sum(len(f) for f in every) if rank == 0 else None, root=0)
    if rank == 0:
        for f in every:
            for line in f:
                print(line, file=sys.stderr)
        print("%s: %d ranks, %s" % (os.path.basename(sys.argv[0]), size, "FAILED" if bad else "passed"), flush=True)
    sys.exit(1 if bad else 0)


# A pattern of raw bits: element i of tensor seed's global (layout-shaped)
# array. Comparing raw bits checks every dtype exactly.
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def pattern(shape, itemsize, seed, step=0):
    n = 1
    for d in shape:
        n *= d
    i = np.arange(n, dtype=np.uint64)
    v = (i * np.uint64(2654435761) + np.uint64(seed * 7919 + step * 104729 + 1)) >> np.uint64(5)
    return v.astype(_UINT[itemsize]).reshape(shape)


def box(a, offset, shape):
    return a[tuple(slice(o, o + s) for o, s in zip(offset, shape))]


def raw(x):
    """A numpy array's raw bits (a view)."""
    return x.view(_UINT[x.dtype.itemsize])


# FP8 (E4M3) checks without a quantizer: values E4M3 represents exactly,
# with 448 (its largest) in every block, quantize with scale 1 to their own
# encodings.
def e4m3(b):
    """The value of E4M3 byte b (no NaN: b & 0x7f != 0x7f)."""
    e, m = (b >> 3) & 0xF, b & 7
    v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if b & 0x80 else v


ENCODE = {e4m3(b): b for b in range(0x100) if b & 0x7F != 0x7F and b != 0x80}
VALUES = np.array(sorted(ENCODE), dtype=np.float64)


def e4m3_values(shape, mode, seed):
    """Exact E4M3 values, 448 at the corner of every block (block: 128x128
    over the last two dims; row: every row; tensor: every matrix)."""
    rng = np.random.default_rng(seed)
    v = rng.choice(VALUES, size=shape)
    if mode is None:
        return v
    lead = (slice(None),) * (len(shape) - 2)
    if mode == "block":
        v[lead + (slice(None, None, 128), slice(None, None, 128))] = 448.0
    elif mode == "row":
        v[lead + (slice(None), 0)] = 448.0
    else:
        v[lead + (0, 0)] = 448.0
    return v


def as_dtype(v, dtype):
    f = v.astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bfloat16" else f
