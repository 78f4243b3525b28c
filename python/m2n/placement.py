"""Layouts in DTensor's vocabulary: Shard(d), Replicate(), device meshes of
session ranks, and named tensors with a source and a destination layout."""

import ctypes

from . import _lib
from .errors import check

MAX_DIMS = 8


class Shard:
    """Shard(d): split tensor dim d over a mesh axis, as torch.chunk does
    (parts of ceil(n/k), trailing parts possibly empty)."""

    def __init__(self, dim):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise ValueError("Shard(%r): want a tensor dim, an int >= 0" % (dim,))
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("S", self.dim))

    def __repr__(self):
        return "Shard(dim=%d)" % self.dim


class Replicate:
    """Replicate(): every rank of the mesh axis holds a copy."""

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("R")

    def __repr__(self):
        return "Replicate()"


def placement(p):
    """Reads a placement: m2n's Shard and Replicate, PyTorch's
    (torch.distributed.tensor.Shard and Replicate), or "S0" and "R"."""
    if isinstance(p, (Shard, Replicate)):
        return p
    if isinstance(p, str):
        s = p.strip()
        if s in ("R", "Replicate()"):
            return Replicate()
        if s.startswith("S") and s[1:].isdigit():
            return Shard(int(s[1:]))
        raise ValueError("placement %r: want Shard(d), Replicate(), \"S<d>\" or \"R\"" % p)
    if callable(getattr(p, "is_shard", None)) and p.is_shard() and not type(p).__name__.startswith("_Strided"):
        return Shard(int(p.dim))
    if callable(getattr(p, "is_replicate", None)) and p.is_replicate():
        return Replicate()
    raise ValueError("placement %r: m2n supports Shard(d) and Replicate() (not Partial or strided shards)" % (p,))


def _nested(x):
    """Flattens a nested sequence of ranks, returning (shape, flat)."""
    if hasattr(x, "tolist"):  # numpy arrays, torch tensors
        x = x.tolist()
    if hasattr(x, "__index__"):
        raise ValueError("a mesh needs at least one axis, got the rank %r" % (x,))
    x = list(x)
    if not x:
        raise ValueError("an empty mesh")
    if all(hasattr(r, "__index__") for r in x):
        return (len(x),), [int(r) for r in x]
    shapes, flat = [], []
    for row in x:
        s, f = _nested(row)
        shapes.append(s)
        flat += f
    if len(set(shapes)) != 1:
        raise ValueError("mesh rows of different shapes: %s" % sorted(set(shapes)))
    return (len(x),) + shapes[0], flat


class Mesh:
    """A device mesh of session ranks, as DTensor's DeviceMesh holds them:
    Mesh([[4, 5], [6, 7]]) is a 2x2 mesh (the nested lists, or a numpy
    array, of ranks); Mesh(range(4, 8), shape=(2, 2)) is the same. A torch
    DeviceMesh works too (its .mesh), when its ranks are the session's."""

    def __init__(self, ranks, shape=None):
        if hasattr(ranks, "mesh") and not isinstance(ranks, Mesh):  # torch DeviceMesh
            ranks = ranks.mesh
        if isinstance(ranks, Mesh):
            shape, ranks = ranks.shape, ranks.ranks
        if shape is None:
            shape, flat = _nested(ranks)
        else:
            shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
            flat = [int(r) for r in (ranks.tolist() if hasattr(ranks, "tolist") else ranks)]
            n = 1
            for d in shape:
                n *= d
            if n != len(flat):
                raise ValueError("mesh shape %s holds %d ranks, got %d" % ("x".join(map(str, shape)), n, len(flat)))
        if not 1 <= len(shape) <= MAX_DIMS:
            raise ValueError("a mesh has 1 to %d axes, got %d" % (MAX_DIMS, len(shape)))
        self.shape = tuple(shape)
        self.ranks = tuple(flat)

    @property
    def ndim(self):
        return len(self.shape)

    def __contains__(self, rank):
        return rank in self.ranks

    def __eq__(self, other):
        return isinstance(other, Mesh) and other.shape == self.shape and other.ranks == self.ranks

    def __repr__(self):
        return "Mesh(%s, shape=%s)" % (list(self.ranks), self.shape)


class Layout:
    """One side of a tensor: a mesh and one placement per mesh axis."""

    def __init__(self, mesh, placements):
        self.mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
        if isinstance(placements, (str, Shard, Replicate)) or not hasattr(placements, "__iter__"):
            placements = [placements]
        self.placements = tuple(placement(p) for p in placements)

    def __eq__(self, other):
        return isinstance(other, Layout) and other.mesh == self.mesh and other.placements == self.placements

    def __repr__(self):
        return "Layout(%r, %r)" % (self.mesh, list(self.placements))


def dtype_name(dt):
    """m2n's spelling of a dtype: a string (bf16, float32, ...), a numpy
    dtype or a torch dtype."""
    if isinstance(dt, str):
        return dt[6:] if dt.startswith("torch.") else dt
    s = str(dt)
    if s.startswith("torch."):
        return s[6:]
    name = getattr(dt, "name", None)  # numpy dtype
    if name is None and hasattr(dt, "dtype"):
        name = getattr(dt.dtype, "name", None)
    if name is None:
        try:
            import numpy as np
            name = np.dtype(dt).name
        except Exception:
            raise ValueError("dtype %r: want a name (bf16, float32, ...), a numpy or a torch dtype" % (dt,))
    return name


# element sizes by m2n's names and their aliases.
_SIZES = {}
for _names, _size in ((("bf16", "bfloat16"), 2), (("f16", "float16", "fp16", "half"), 2),
                      (("f32", "float32", "fp32", "float"), 4), (("f64", "float64", "fp64", "double"), 8),
                      (("i8", "int8"), 1), (("u8", "uint8"), 1), (("i32", "int32", "int"), 4),
                      (("i64", "int64", "long"), 8), (("fp8e4m3", "float8_e4m3fn", "e4m3"), 1),
                      (("fp8e5m2", "float8_e5m2", "e5m2"), 1)):
    for _n in _names:
        _SIZES[_n] = (_names[0], _size)


def canonical(name):
    """(m2n's short name, element size) of a dtype name, or (None, 0)."""
    return _SIZES.get(name.lower(), (None, 0))


class Tensor:
    """A named tensor of a call: its global shape and dtype, and its layout
    on the source (trainer) and destination (generator) side. src_view and
    dst_view, each (offset, strides) in elements, place this rank's part in
    a larger buffer (fused weights: several tensors' parts in one buffer,
    which run then gets for each of them); strides None is row-major over
    the rank's local shape; a view of None: the part is dense, in a buffer
    of exactly its size. Views are this rank's own (they may differ
    between ranks); the rest must be the same on every rank. FP8 in flight:
    dst_dtype "float8_e4m3fn" (fp8e4m3) from a bf16 or float32 dtype, with
    scale "block" (128x128), "row" or "tensor", converts while it moves;
    the destination ranks also receive their float32 scales
    (weight_scale_inv; scale_part says which blocks)."""

    def __init__(self, name, shape, dtype, src, dst, src_view=None, dst_view=None, dst_dtype=None, scale=None):
        self.name = str(name)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype_name(dtype)
        self.dst_dtype = dtype_name(dst_dtype) if dst_dtype is not None else self.dtype
        if scale not in _lib.SCALES:
            raise ValueError("scale %r: want None, \"block\", \"row\" or \"tensor\"" % (scale,))
        self.scale = scale
        self.src = src if isinstance(src, Layout) else Layout(*src)
        self.dst = dst if isinstance(dst, Layout) else Layout(*dst)
        self.views = (src_view, dst_view)

    def __repr__(self):
        return "Tensor(%r, %s, %s, src=%r, dst=%r)" % (self.name, self.shape, self.dtype, self.src, self.dst)

    def layout(self, side):
        return self.src if _side(side) == _lib.SRC else self.dst

    def side_dtype(self, side):
        """The dtype of a side's buffers ("scale": float32)."""
        if side == "scale":
            return "float32"
        return self.dtype if _side(side) == _lib.SRC else self.dst_dtype

    def _c(self, keep, rank=None):
        """The m2n_tensor, its arrays appended to keep (alive for the call),
        with rank's views (a view without strides: row-major over rank's
        local shape)."""

        def arr(ctype, values):
            a = (ctype * max(1, len(values)))(*values)
            keep.append(a)
            return ctypes.cast(a, ctypes.POINTER(ctype))

        t = _lib.Tensor()
        t.name = self.name.encode()
        t.dtype = self.dtype.encode()
        t.ndim = len(self.shape)
        t.shape = arr(ctypes.c_int64, self.shape)
        t.dst_dtype = self.dst_dtype.encode()
        t.scale = _lib.SCALES[self.scale]
        for which, lay, view in (("src", self.src, self.views[0]), ("dst", self.dst, self.views[1])):
            s = getattr(t, which)
            s.mesh_ndim = lay.mesh.ndim
            s.mesh_shape = arr(ctypes.c_int32, lay.mesh.shape)
            s.ranks = arr(ctypes.c_int32, lay.mesh.ranks)
            s.placements = arr(ctypes.c_int32, [p.dim if isinstance(p, Shard) else _lib.REPLICATE for p in lay.placements])
            if view is not None and rank is not None and rank in lay.mesh:
                offset, strides = view
                if strides is None:
                    strides, acc = [], 1
                    for d in reversed(self.local_shape(which, rank)):
                        strides.insert(0, acc)
                        acc *= d
                s.view_offset = int(offset)
                s.view_strides = arr(ctypes.c_int64, [int(x) for x in strides])
            setattr(t, which, s)
        keep.append(t)
        return t

    def part(self, side, rank):
        """This rank's part of a side, as DTensor computes it: (local shape,
        global offset, bytes), or None when the rank is not in that mesh."""
        keep = []
        t = self._c(keep)
        n = max(1, len(self.shape))
        shape, offset = (ctypes.c_int64 * n)(), (ctypes.c_int64 * n)()
        held, nbytes = ctypes.c_int32(), ctypes.c_int64()
        check(_lib.lib().m2n_tensor_part(ctypes.byref(t), _side(side), rank, ctypes.byref(held), shape, offset,
                                         ctypes.byref(nbytes)))
        if not held.value:
            return None
        k = len(self.shape)
        return tuple(shape[:k]), tuple(offset[:k]), nbytes.value

    def scale_part(self, rank):
        """The scale blocks rank holds of a tensor converted to FP8: (shape
        and offset of its box of the block grid, bytes), or None."""
        keep = []
        t = self._c(keep)
        n = max(1, len(self.shape))
        shape, offset = (ctypes.c_int64 * n)(), (ctypes.c_int64 * n)()
        held, nbytes = ctypes.c_int32(), ctypes.c_int64()
        check(_lib.lib().m2n_tensor_scale(ctypes.byref(t), rank, ctypes.byref(held), shape, offset, ctypes.byref(nbytes)))
        if not held.value:
            return None
        k = len(self.shape)
        return tuple(shape[:k]), tuple(offset[:k]), nbytes.value

    def local_shape(self, side, rank):
        """The local shape of rank's part of a side, or None."""
        p = self.part(side, rank)
        return None if p is None else p[0]


def _side(side):
    if side in (_lib.SRC, "src", "source"):
        return _lib.SRC
    if side in (_lib.DST, "dst", "destination"):
        return _lib.DST
    raise ValueError("side %r: want \"src\" or \"dst\"" % (side,))
