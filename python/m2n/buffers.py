"""Local buffers from numpy arrays and torch tensors (CPU or CUDA)."""

from . import _lib
from .placement import canonical

# dtypes that stand for another of the same size: numpy has no bfloat16 or
# float8, so their raw bits come as 16- and 8-bit integers.
_RAW = {"bf16": ("uint16", "int16"), "f16": ("uint16", "int16"), "fp8e4m3": ("uint8", "int8"),
        "fp8e5m2": ("uint8", "int8")}

def is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")

def describe(x):
    """(pointer, bytes, memory, dtype name, contiguous, writeable, cuda device
    index or None) of a numpy array or torch tensor."""
    if is_torch(x):
        nbytes = x.numel() * x.element_size()
        cuda = x.device.type == "cuda"
        return (x.data_ptr(), nbytes, _lib.MEMORY_CUDA if cuda else _lib.MEMORY_HOST, str(x.dtype)[6:],
                x.is_contiguous(), True, x.device.index if cuda else None)
    if hasattr(x, "__array_interface__") and hasattr(x, "flags") and hasattr(x, "ctypes"):
        return (x.ctypes.data, x.nbytes, _lib.MEMORY_HOST, x.dtype.name, bool(x.flags.c_contiguous),
                bool(x.flags.writeable), None)
    raise TypeError("%s: want a numpy array or a torch tensor" % type(x).__name__)

def shape_of(x):
    """x's shape as a tuple of ints."""
    return tuple(int(d) for d in x.shape)


def buffer(x, want, side, device, cuda_device, shape=None, shapes=None):
    """The m2n_buffer for x (None: no buffer) and the reason this rank must
    refuse the step, if any. want is the tensor's dtype, device the
    session's ("cpu" or "cuda"), cuda_device its GPU ordinal (or None).
    shape, if not None, is the shape x must have (this rank's part, for a
    dense part); shapes, if not None, a list of shapes x may have, any one
    of them (a model's buffer)."""
    b = _lib.Buffer()
    if x is None:
        return b, None
    try:
        ptr, nbytes, memory, dtype, contiguous, writeable, index = describe(x)
    except TypeError as e:
        return b, str(e)
    got = shape_of(x)
    if shape is not None and got != tuple(shape) and not (tuple(shape) == () and got == (1,)):
        # (a 0-dim part may come as one element: numpy.ascontiguousarray makes it so)
        return b, ("has shape %s, but this rank's part is %s (a transposed or reshaped array of the same size is "
                   "refused: pass the part as DTensor's to_local() holds it, or describe a larger buffer with a view)" %
                   (_fmt(got), _fmt(shape)))
    if shapes is not None and got not in [tuple(sh) for sh in shapes]:
        return b, "has shape %s, want %s" % (_fmt(got), " or ".join(_fmt(sh) for sh in shapes))
    if not contiguous:
        strides = tuple(x.stride()) if is_torch(x) else tuple(x.strides)
        return b, ("is not contiguous (shape %s, strides %s): m2n moves dense row-major buffers; pass a contiguous "
                   "one (.contiguous(), numpy.ascontiguousarray), or describe the part with a view" %
                   (tuple(x.shape), strides))
    if side == _lib.DST and not writeable:
        return b, "is read-only"
    if memory == _lib.MEMORY_CUDA and cuda_device is not None and index != cuda_device:
        return b, "is on cuda:%s, but the session's GPU is cuda:%d" % (index, cuda_device)
    short, _ = canonical(want)
    if short in _RAW and dtype in _RAW[short]:
        dtype = want  # raw bits of the tensor's dtype
    b.data = ptr or None
    b.bytes = nbytes
    b.memory = memory
    b.dtype = dtype.encode()
    return b, None

def _fmt(shape):
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def empty(dtype, elems, lib="numpy", device=None):
    """An uninitialised 1-dim array of elems elements of an m2n dtype, from
    numpy (bf16 and fp8 as raw 16- and 8-bit integers) or torch."""
    short, _ = canonical(dtype)
    if lib == "torch":
        import torch
        names = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "u8": "uint8",
                 "i32": "int32", "i64": "int64", "fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2"}
        tdt = getattr(torch, names[short], None) or torch.uint8
        return torch.empty(elems, dtype=tdt, device=device or "cpu")
    import numpy as np
    names = {"bf16": "uint16", "f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "u8": "uint8",
             "i32": "int32", "i64": "int64", "fp8e4m3": "uint8", "fp8e5m2": "uint8"}
    return np.empty(elems, dtype=names[short])

def cstr(s):
    return None if s is None else str(s).encode()

