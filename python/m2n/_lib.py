"""The C library behind the package: ctypes mirrors of m2n.h's structs and
the prototypes of its functions, and how the library is found."""

import ctypes
import os

ABI_VERSION = 5

# Result codes (m2n.h).
OK = 0
ERR_INVALID = 1
ERR_VALIDATION = 2
ERR_AGREEMENT = 3
ERR_CHECKSUM = 4
ERR_TIMEOUT = 5
ERR_ABORT = 6
ERR_UNAVAILABLE = 7
ERR_OTHER = 8
ERR_INTERNAL = 9
ERR_CALL_MISMATCH = 10
ERR_LEFT = 11

DEVICE_CPU = 0
DEVICE_CUDA = 1
CUDA_DEVICE_LOCAL_RANK = -1
REPLICATE = -1
SRC = 0
DST = 1
MEMORY_NONE = 0
MEMORY_HOST = 1
MEMORY_CUDA = 2
SCALES = {None: 0, "none": 0, "block": 1, "row": 2, "tensor": 3}

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_int64_p = ctypes.POINTER(ctypes.c_int64)


class Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("cuda_device", ctypes.c_int32),
        ("verify", ctypes.c_int32),
        ("timeout_seconds", ctypes.c_double),
        ("chunk_bytes", ctypes.c_int64),
        ("staging_bytes", ctypes.c_int64),
        ("coalesce_bytes", ctypes.c_int64),
        ("src_domain_size", ctypes.c_int32),
        ("dst_domain_size", ctypes.c_int32),
        ("atomic", ctypes.c_int32),
        ("stripe", ctypes.c_int32),
        ("emulate_net_bw", ctypes.c_double),
        ("delta", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class Side(ctypes.Structure):
    _fields_ = [
        ("mesh_ndim", ctypes.c_int32),
        ("mesh_shape", c_int32_p),
        ("ranks", c_int32_p),
        ("placements", c_int32_p),
        ("view_offset", ctypes.c_int64),
        ("view_strides", c_int64_p),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int32),
        ("shape", c_int64_p),
        ("src", Side),
        ("dst", Side),
        ("dst_dtype", ctypes.c_char_p),
        ("scale", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class Buffer(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_int64),
        ("memory", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("dtype", ctypes.c_char_p),
    ]


class TensorBuffers(ctypes.Structure):
    _fields_ = [("src", Buffer), ("dst", Buffer), ("scale", Buffer)]


class Report(ctypes.Structure):
    _fields_ = [
        ("completed", ctypes.c_int64),
        ("failed", ctypes.c_int64),
        ("seconds", ctypes.c_double),
        ("sent_network", ctypes.c_int64),
        ("sent_local", ctypes.c_int64),
        ("recv_network", ctypes.c_int64),
        ("recv_local", ctypes.c_int64),
        ("copied", ctypes.c_int64),
        ("packed", ctypes.c_int64),
        ("messages", ctypes.c_int64),
        ("rounds", ctypes.c_int64),
    ]


class DeltaReport(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("delta", ctypes.c_int32),
        ("sent_network", ctypes.c_int64),
        ("sent_local", ctypes.c_int64),
        ("copied", ctypes.c_int64),
        ("dense_network", ctypes.c_int64),
        ("dense_local", ctypes.c_int64),
        ("dense_copied", ctypes.c_int64),
    ]


class NamedBuffer(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("buffer", Buffer)]


_u64 = ctypes.c_uint64
_u64_p = ctypes.POINTER(ctypes.c_uint64)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_int = ctypes.c_int
_PROTOTYPES = {
    "m2n_abi_version": (ctypes.c_int32, []),
    "m2n_last_error": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "m2n_last_error_detail": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "m2n_last_error_code": (ctypes.c_int32, []),
    "m2n_options_init": (None, [ctypes.POINTER(Options)]),
    "m2n_session_join": (_int, [ctypes.c_int32, ctypes.POINTER(Options), _u64_p]),
    "m2n_session_listen": (_int, [ctypes.c_int32, ctypes.POINTER(Options), ctypes.c_char_p, _u64_p]),
    "m2n_session_connect": (_int, [ctypes.c_int32, ctypes.POINTER(Options), ctypes.c_char_p, _u64_p]),
    "m2n_session_rank": (_int, [_u64, c_int32_p]),
    "m2n_session_size": (_int, [_u64, c_int32_p]),
    "m2n_session_aborted": (_int, [_u64, c_int32_p]),
    "m2n_session_close": (_int, [_u64]),
    "m2n_session_leave": (_int, [_u64, ctypes.c_char_p]),
    "m2n_session_refuse": (_int, [ctypes.c_int32, ctypes.c_char_p]),
    "m2n_tensor_part": (_int, [ctypes.POINTER(Tensor), ctypes.c_int32, ctypes.c_int32, c_int32_p, c_int64_p, c_int64_p,
                               c_int64_p]),
    "m2n_tensor_scale": (_int, [ctypes.POINTER(Tensor), ctypes.c_int32, c_int32_p, c_int64_p, c_int64_p, c_int64_p]),
    "m2n_call_prepare": (_int, [_u64, ctypes.POINTER(Tensor), ctypes.c_int64, ctypes.c_char_p, _u64_p]),
    "m2n_call_run": (_int, [_u64, ctypes.POINTER(TensorBuffers), ctypes.c_int64, ctypes.c_size_t,
                            ctypes.POINTER(Report), ctypes.POINTER(ctypes.c_uint8)]),
    "m2n_call_refuse": (_int, [_u64, ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p]),
    "m2n_call_tensors": (_int, [_u64, c_int64_p]),
    "m2n_call_describe": (_int, [_u64, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "m2n_call_close": (_int, [_u64]),
    "m2n_call_set_version": (_int, [_u64, ctypes.c_uint64]),
    "m2n_call_held": (_int, [_u64, ctypes.POINTER(ctypes.c_uint64), c_int32_p, c_int32_p]),
    "m2n_call_resync": (_int, [_u64]),
    "m2n_call_delta_report": (_int, [_u64, ctypes.POINTER(DeltaReport)]),
    "m2n_model_prepare": (_int, [_u64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                 ctypes.c_char_p, _u64_p]),
    "m2n_model_describe": (_int, [_u64, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "m2n_model_run": (_int, [_u64, ctypes.POINTER(NamedBuffer), ctypes.c_int64, ctypes.POINTER(NamedBuffer),
                             ctypes.c_int64, ctypes.POINTER(NamedBuffer), ctypes.c_int64, ctypes.c_size_t,
                             ctypes.POINTER(Report)]),
    "m2n_model_refuse": (_int, [_u64, ctypes.c_char_p]),
    "m2n_model_close": (_int, [_u64]),
    "m2n_model_set_version": (_int, [_u64, ctypes.c_uint64]),
    "m2n_model_held": (_int, [_u64, ctypes.POINTER(ctypes.c_uint64), c_int32_p, c_int32_p]),
    "m2n_model_resync": (_int, [_u64]),
    "m2n_model_delta_report": (_int, [_u64, ctypes.POINTER(DeltaReport)]),
    "m2n_model_lora": (_int, [_u64, ctypes.c_int64, ctypes.c_double, ctypes.c_char_p, ctypes.c_char_p, _u64_p]),
    "m2n_model_merge_lora": (_int, [_u64, _u64, ctypes.POINTER(NamedBuffer), ctypes.c_int64, ctypes.POINTER(NamedBuffer),
                                    ctypes.c_int64]),
    "m2n_model_merge_lora_scales": (_int, [_u64, _u64, ctypes.POINTER(NamedBuffer), ctypes.c_int64, ctypes.POINTER(NamedBuffer),
                                           ctypes.c_int64, ctypes.POINTER(NamedBuffer), ctypes.c_int64]),
    "m2n_job_failed": (ctypes.c_int32, []),
    "m2n_abort_job": (None, [ctypes.c_int32]),
}

_lib = None


def _candidates():
    env = os.environ.get("M2N_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libm2n.so")
    # a checkout: python/m2n next to dist/ (make capi)
    yield os.path.join(here, os.pardir, os.pardir, "dist", "libm2n.so")
    yield "libm2n.so"  # the loader's search path (LD_LIBRARY_PATH, ldconfig)


def lib():
    """Returns the loaded C library, loading it on first use: $M2N_LIBRARY,
    else libm2n.so next to this package, in the checkout's dist/ (make capi),
    or on the loader's path."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            # RTLD_GLOBAL: OpenMPI's plugins need libmpi's symbols global.
            handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(handle, name)
            fn.restype = res
            fn.argtypes = args
        v = handle.m2n_abi_version()
        if v != ABI_VERSION:
            raise ImportError("m2n: %s has ABI version %d; this package needs %d" % (path, v, ABI_VERSION))
        _lib = handle
        return _lib
    raise ImportError("m2n: cannot load libm2n.so (build it with `make capi`, or set M2N_LIBRARY); tried: " +
                      "; ".join(tried))
