"""What Call.run and Model.run share: the report dict (delta mode's
numbers too), the CUDA stream a step waits for, and the library's JSON
descriptions and held versions."""

import ctypes
import json

from . import _lib
from .buffers import is_torch
from .errors import check


def _describe(fn, handle):
    need = ctypes.c_size_t()
    check(fn(handle, None, 0, ctypes.byref(need)))
    buf = ctypes.create_string_buffer(need.value)
    check(fn(handle, buf, need.value, ctypes.byref(need)))
    return json.loads(buf.value.decode())


def _report(rep):
    return {
        "seconds": rep.seconds,
        "sent": {"network": rep.sent_network, "local": rep.sent_local},
        "received": {"network": rep.recv_network, "local": rep.recv_local},
        "copied": rep.copied,
        "packed": rep.packed,
        "messages": rep.messages,
        "rounds": rep.rounds,
    }


def _stream(stream, arrays):
    """The CUDA stream to wait for: stream (an int or a torch.cuda.Stream),
    else torch's current stream on the device of the first CUDA tensor,
    else 0 (all the GPU's work)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    for x in arrays:
        if x is not None and is_torch(x) and x.device.type == "cuda":
            import torch
            return int(torch.cuda.current_stream(x.device).cuda_stream)
    return 0


def _delta(fn, h):
    """What m2n_call_delta_report or m2n_model_delta_report says of the last
    step, as the report's "delta" and "dense"."""
    d = _lib.DeltaReport(struct_size=ctypes.sizeof(_lib.DeltaReport))
    check(fn(h, ctypes.byref(d)))
    return {"delta": bool(d.delta), "dense": {"network": d.dense_network, "local": d.dense_local, "copied": d.dense_copied}}


def _held(fn, h):
    """What m2n_call_held or m2n_model_held says, as a dict."""
    v, verified, intact = ctypes.c_uint64(), ctypes.c_int32(), ctypes.c_int32()
    check(fn(h, ctypes.byref(v), ctypes.byref(verified), ctypes.byref(intact)))
    return {"version": v.value, "verified": bool(verified.value), "intact": bool(intact.value)}
