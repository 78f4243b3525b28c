"""Fused buffers for per-tensor calls: several tensors' parts side by side
in one local buffer of a rank (vLLM's qkv_proj holds [q; k; v] by rows,
gate_up_proj [gate; up]; Megatron's linear_fc1 [gate; up]), placed by views
that fuse() computes from the tensors' local shapes."""

from .buffers import empty as _empty
from .placement import Tensor, _side


def _row_major(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.insert(0, acc)
        acc *= d
    return strides


class Fused:
    """One rank's fused buffer on one side of several tensors (fuse()):
    tensors are the tensors again, with this rank's view on that side
    placing each part in the buffer (pass them to Session.prepare); shape
    and dtype describe the buffer (shape None: this rank holds none of
    them); layout maps each tensor this rank holds to (start, stop) along
    dim, the rows (or columns) of the buffer its part fills."""

    def __init__(self, tensors, side, rank, dim, shape, dtype, layout):
        self.tensors, self.side, self.rank, self.dim = tensors, side, rank, dim
        self.shape, self.dtype, self.layout = shape, dtype, layout

    def empty(self, lib="numpy", device=None):
        """An uninitialised buffer of this rank (numpy, bf16 and fp8 as raw
        16- and 8-bit integers, or torch), or None when it holds no part."""
        if self.shape is None:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return _empty(self.dtype, n, lib, device).reshape(self.shape)

    def buffers(self, buf):
        """{name: buf} for every tensor this rank holds: what Call.run takes
        for this side (merge it with the other tensors' arrays)."""
        return {name: buf for name in self.layout} if buf is not None else {}

    def parts(self, buf):
        """{name: the part of buf that holds the tensor}: views, to fill the
        sources or read the destinations (numpy or torch slicing)."""
        out = {}
        for name, (start, stop) in self.layout.items():
            index = (slice(None),) * self.dim + (slice(start, stop),)
            out[name] = buf[index]
        return out

    def __repr__(self):
        return "Fused(%s, side=%r, rank=%d, dim=%d, shape=%s)" % ([t.name for t in self.tensors], self.side, self.rank,
                                                                  self.dim, self.shape)


def fuse(tensors, side, rank, dim=0):
    """Places this rank's parts of tensors side by side along dim of one
    local buffer on side ("src" or "dst"), in the order given: vLLM's
    qkv_proj is fuse([q, k, v], "dst", rank), its gate_up_proj fuse([gate,
    up], "dst", rank). The parts must have the same dtype on that side and
    the same local shape except along dim; the buffer's shape is theirs
    with dim summed. Returns a Fused: its tensors carry the views (give
    them to Session.prepare in place of the originals; a tensor's view on
    the other side is kept, so a tensor fused on both sides goes through
    fuse twice), empty() allocates the buffer, buffers(buf) is what
    Call.run takes, and parts(buf) the views to fill or read. Views are
    this rank's own: every rank calls fuse with its own rank. Raises
    ValueError naming the tensors whose parts do not line up."""
    tensors = list(tensors)
    names = [getattr(t, "name", None) for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("fuse: tensor names repeat: %s" % names)
    which = "src" if _side(side) == 0 else "dst"
    held, shapes = [], []
    dtype = None
    for t in tensors:
        if not isinstance(t, Tensor):
            raise ValueError("fuse: %r is not an m2n.Tensor" % (t,))
        shape = t.local_shape(which, rank)
        if shape is None:
            continue
        if len(shape) == 0 or not 0 <= dim < len(shape):
            raise ValueError("fuse: tensor %r has %d dims on rank %d; cannot fuse along dim %d" %
                             (t.name, len(shape), rank, dim))
        dt = t.side_dtype(which)
        if dtype is not None and dt != dtype:
            raise ValueError("fuse: tensor %r is %s on the %s side, %r is %s" % (t.name, dt, which, held[0].name, dtype))
        if shapes and (len(shape) != len(shapes[0]) or
                       any(a != b for k, (a, b) in enumerate(zip(shape, shapes[0])) if k != dim)):
            raise ValueError("fuse: on rank %d tensor %r's part is %s and %r's is %s: they must match except along dim %d" %
                             (rank, t.name, tuple(shape), held[0].name, tuple(shapes[0]), dim))
        dtype = dt
        held.append(t)
        shapes.append(tuple(shape))
    if not held:
        return Fused(tensors, which, rank, dim, None, None, {})
    total = list(shapes[0])
    total[dim] = sum(sh[dim] for sh in shapes)
    strides = _row_major(total)
    out, layout, at = [], {}, 0
    starts = {}
    for t, sh in zip(held, shapes):
        starts[t.name] = at
        layout[t.name] = (at, at + sh[dim])
        at += sh[dim]
    for t in tensors:
        views = list(t.views)
        if t.name in starts:
            views[0 if which == "src" else 1] = (starts[t.name] * strides[dim], list(strides))
        out.append(Tensor(t.name, t.shape, t.dtype, src=t.src, dst=t.dst, src_view=views[0], dst_view=views[1],
                          dst_dtype=t.dst_dtype, scale=t.scale))
    return Fused(out, which, rank, dim, tuple(total), dtype, layout)
