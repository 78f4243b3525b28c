"""m2n from Python: reshard distributed tensors between process groups (RL
weight sync: trainer ranks hand their weights to generator ranks that want
another layout) with PyTorch DTensor's layouts, over the m2n C library
(libm2n.so, `make capi`), with ctypes.

    from mpi4py import MPI
    import m2n

    trainer = m2n.Mesh(range(0, 4))                  # ranks 0-3
    generator = m2n.Mesh([[4, 5], [6, 7]])           # ranks 4-7: DP2 x TP2
    w = m2n.Tensor("q_proj.weight", (256, 64), "bfloat16",
                   src=(trainer, [m2n.Shard(0)]), dst=(generator, [m2n.Replicate(), m2n.Shard(0)]))
    with m2n.Session(MPI.COMM_WORLD) as s:
        call = s.prepare([w], route="hier")          # once
        mine = call.empty("dst")                     # this rank's generator buffers ({} on trainer ranks)
        report = call.run(src={"q_proj.weight": shard}, dst=mine)  # every step; shard: this rank's part

Run it as `scripts/mpirun.sh -np 8 /usr/bin/python3 -m mpi4py prog.py`
(mpirun's flags for root and for more ranks than cores; the interpreter
that holds Debian's mpi4py; an exception anywhere ends the job). With a
session open, an uncaught exception prints its traceback once with the
rank, leaves the session (the peers raise LeftError naming the rank) and
ends the job with MPI_Abort. m2n.fuse places several tensors' parts in one
fused buffer; Session.prepare_model moves whole models. See
docs/python.md.
"""

from .errors import (AbortError, AgreementError, CallMismatchError, ChecksumError, Error, InternalError,
                     InvalidArgument, LeftError, TimeoutError, Unavailable, ValidationError)
from .fused import Fused, fuse
from .placement import Layout, Mesh, Replicate, Shard, Tensor
from .model import Model, vllm_refresh_hook
from .session import Call, Session

__all__ = [
    "AbortError", "AgreementError", "Call", "CallMismatchError", "ChecksumError", "Error", "Fused", "InternalError",
    "InvalidArgument", "Layout", "LeftError", "Mesh", "Model", "Replicate", "Session", "Shard", "Tensor", "TimeoutError",
    "Unavailable", "ValidationError", "fuse", "vllm_refresh_hook",
]
