"""What Call.run and Model.run share: the report dict, the CUDA stream a
step waits for, and the library's JSON descriptions and held versions."""

import ctypes
import json

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


def _held(fn, h):
    """What m2n_call_held or m2n_model_held says, as a dict."""
    v, verified, intact = ctypes.c_uint64(), ctypes.c_int32(), ctypes.c_int32()
    check(fn(h, ctypes.byref(v), ctypes.byref(verified), ctypes.byref(intact)))
    return {"version": v.value, "verified": bool(verified.value), "intact": bool(intact.value)}
