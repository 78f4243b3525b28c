"""Sessions, calls and whole models over the C library."""

import atexit
import ctypes
import json
import numbers
import os
import sys
import threading
import time
import traceback

from . import _lib
from .buffers import buffer, cstr, empty, is_torch
from .errors import Error, InvalidArgument, check
from .placement import Tensor, _side


def _route(route, balance=None, net_bw=None, local_bw=None, latency=None):
    """The route string of m2n.h: "name[:key=value,...]"."""
    params = [("balance", balance), ("net_bw", net_bw), ("local_bw", local_bw), ("latency", latency)]
    extra = ",".join("%s=%s" % (k, repr(v) if isinstance(v, float) else v) for k, v in params if v is not None)
    return (route or "hier") + (":" + extra if extra else "")


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


class Session:
    """One rank's membership in a group of ranks that refit together,
    joined on an mpi4py communicator (default MPI.COMM_WORLD; every rank of
    it joins, with equal options). MPI must be initialised with
    MPI_THREAD_MULTIPLE, as mpi4py does by default; m2n never initialises
    it. device is "cpu" (host memory, over MPI) or "cuda" (one GPU per rank,
    over NCCL): torch's current device where torch is imported (call
    torch.cuda.set_device(local_rank) first, as torch programs do), else the
    GPU whose ordinal is the rank's local rank; "cuda:N" picks GPU N. Two
    ranks of a host on one GPU fail at once, naming them. timeout bounds
    every wait, in seconds (default 300; NaN, infinite, negative or
    sub-nanosecond values are refused). The other options are
    m2n_options' (m2n.h). An option this rank cannot read fails every
    rank's Session(...) at once with a ValidationError naming it. Close it
    (or use `with`) on every rank after its last step; a rank that leaves
    early (an uncaught exception, a call used after closing it, a program
    ending with the session open) is named to its peers, which raise
    LeftError at their next collective."""

    def __init__(self, comm=None, device="cpu", timeout=None, verify=False, atomic=False, stripe=False,
                 chunk_bytes=0, staging_bytes=0, coalesce_bytes=0, src_domain_size=0, dst_domain_size=0,
                 emulate_net_bw=0.0, _link=None):
        lib = _lib.lib()
        self._h = 0
        if comm is None:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        handle = comm.py2f() if hasattr(comm, "py2f") else int(comm)
        o = _lib.Options()
        lib.m2n_options_init(ctypes.byref(o))
        try:
            self._options(o, device, timeout, verify, atomic, stripe, chunk_bytes, staging_bytes, coalesce_bytes,
                          src_domain_size, dst_domain_size, emulate_net_bw)
        except (TypeError, ValueError, OverflowError) as e:
            # take part in the others' join, failing it on every rank at
            # once with this rank's reason, rather than leave them waiting.
            check(lib.m2n_session_refuse(handle, cstr("m2n.Session: %s" % (e,))))
            raise  # not reached: the refusal raises ValidationError
        h = ctypes.c_uint64()
        if _link is None:
            check(lib.m2n_session_join(handle, ctypes.byref(o), ctypes.byref(h)))
        else:
            fn, path = _link
            check(getattr(lib, fn)(handle, ctypes.byref(o), cstr(os.fspath(path)), ctypes.byref(h)))
        self._h = h.value
        _open.append(self)
        r, n = ctypes.c_int32(), ctypes.c_int32()
        check(lib.m2n_session_rank(self._h, ctypes.byref(r)))
        check(lib.m2n_session_size(self._h, ctypes.byref(n)))
        self.rank, self.size = r.value, n.value

    @classmethod
    def listen(cls, comm, path, **options):
        """The trainer's side of a session of two separately launched jobs
        (README: Two jobs, one session): every rank of comm calls it; rank 0
        publishes an MPI port and a random job token in the file at path
        (mode 0600, where the generator's job can read it) and it waits, at
        most the timeout, for one generator job to call Session.connect with
        that path. A job presenting a wrong token is refused and the wait
        goes on. The session's ranks are the trainer's first; meshes are
        given in them. The port file is gone once it returns: listen again
        for the next generator. options are Session's."""
        return cls(comm, _link=("m2n_session_listen", path), **options)

    @classmethod
    def connect(cls, comm, path, **options):
        """The generator's side: joins the trainer job listening on the port
        file at path (Session.listen). A missing, stale, busy or shared port
        file, or a refused token, raises ValidationError naming it."""
        return cls(comm, _link=("m2n_session_connect", path), **options)

    def _options(self, o, device, timeout, verify, atomic, stripe, chunk_bytes, staging_bytes, coalesce_bytes,
                 src_domain_size, dst_domain_size, emulate_net_bw):
        """Fills m2n_options o; raises ValueError or TypeError naming a bad
        argument (the C library checks the values themselves)."""
        dev, _, ordinal = str(device).partition(":")
        if dev in ("cpu", "host") and not ordinal:
            o.device = _lib.DEVICE_CPU
            self.cuda_device = None
        elif dev in ("cuda", "gpu"):
            o.device = _lib.DEVICE_CUDA
            torch = sys.modules.get("torch")
            if ordinal:
                o.cuda_device = int(ordinal)
            elif torch is not None and torch.cuda.is_available():
                o.cuda_device = torch.cuda.current_device()
            self.cuda_device = o.cuda_device if o.cuda_device >= 0 else None
        else:
            raise ValueError("device %r: want \"cpu\" or \"cuda\" (or \"cuda:N\")" % (device,))
        self.device = "cuda" if o.device == _lib.DEVICE_CUDA else "cpu"
        for name, v in (("timeout", timeout), ("emulate_net_bw", emulate_net_bw)):
            if v is not None and (not isinstance(v, numbers.Real) or isinstance(v, bool)):
                raise TypeError("%s %r: want a number of %s" % (name, v, "seconds" if name == "timeout" else
                                                                  "bytes per second"))
        o.timeout_seconds = float(timeout or 0)
        o.verify, o.atomic, o.stripe = int(bool(verify)), int(bool(atomic)), int(bool(stripe))
        for name, v in (("chunk_bytes", chunk_bytes), ("staging_bytes", staging_bytes),
                        ("coalesce_bytes", coalesce_bytes), ("src_domain_size", src_domain_size),
                        ("dst_domain_size", dst_domain_size)):
            if not hasattr(v, "__index__") or isinstance(v, bool):
                raise TypeError("%s %r: want an integer" % (name, v))
        o.chunk_bytes, o.staging_bytes, o.coalesce_bytes = int(chunk_bytes), int(staging_bytes), int(coalesce_bytes)
        o.src_domain_size, o.dst_domain_size = int(src_domain_size), int(dst_domain_size)
        o.emulate_net_bw = float(emulate_net_bw)

    @property
    def aborted(self):
        """Whether the session aborted (a TimeoutError or AbortError)."""
        a = ctypes.c_int32()
        check(_lib.lib().m2n_session_aborted(self._handle(), ctypes.byref(a)))
        return bool(a.value)

    def _handle(self):
        if not self._h:
            raise InvalidArgument("the session is closed")
        return self._h

    def prepare(self, tensors, route="hier", balance=None, net_bw=None, local_bw=None, latency=None):
        """Prepares a call of the named tensors (m2n.Tensor, each with both
        layouts) on a route: flat, agbcast, hier (balance "count" or
        "bytes") or auto (choosing on net_bw and local_bw, bytes per second
        per rank, and latency, seconds per message). Collective: every rank
        passes the same tensors; a rank with another layout fails every rank
        with an AgreementError naming it and the field."""
        tensors = list(tensors)
        for t in tensors:
            if not isinstance(t, Tensor):
                raise InvalidArgument("prepare: %r is not an m2n.Tensor" % (t,))
        keep = []
        arr = (_lib.Tensor * max(1, len(tensors)))(*[t._c(keep, self.rank) for t in tensors])
        h = ctypes.c_uint64()
        check(_lib.lib().m2n_call_prepare(self._handle(), arr, len(tensors),
                                          cstr(_route(route, balance, net_bw, local_bw, latency)), ctypes.byref(h)))
        return Call(self, h.value, tensors)

    def prepare_model(self, model, trainer, generator, scale=None, layers=None, mtp=False, fp8=None, route="hier",
                      balance=None, net_bw=None, local_bw=None, latency=None):
        """Prepares a whole model: model is a built-in name (deepseek-v3,
        kimi-k2, qwen3-235b-a22b, glm-4.5-air, gpt-oss-120b, llama-3.1-70b,
        qwen2.5-72b), a HuggingFace config.json (model_type deepseek_v3,
        kimi_k2, glm4_moe, gpt_oss, llama, mistral, mixtral, qwen2, qwen3,
        qwen3_moe; missing keys take transformers' defaults) or a JSON
        tensor list; trainer a Megatron-Core configuration ("tp=2,pp=2,dp=2";
        etp defaults to tp as in Megatron-Core, vocab-div to 128), generator
        a vLLM one ("tp=4,dp=2": vLLM's data parallelism, under which the
        routed experts split over tp x dp; "engines=2" for independent
        engines; "ep=8" for expert parallelism over tp x dp). Every buffer
        is what that framework's rank holds, padding included: both pad the
        vocabulary (Megatron to a multiple of vocab-div x tp, vLLM to 64),
        and m2n never writes the padding rows. scale divides the widths,
        layers keeps the first layers. The session has the trainer's ranks
        (stage after stage) then the generator's. fp8 ("block", "row" or
        "tensor"): the generator serves FP8 weights, converted in flight:
        what vLLM's FP8 path quantizes (the linear and expert weights of the
        decoder layers) arrives as float8_e4m3fn with its scales
        (Model.buffers("scale")); embeddings, LM head, norms, routers and
        biases as they are. Some tensors need the generator's post-load
        step after every run (Model.refresh_targets, Model.refresh)."""
        load = []
        if fp8:
            load.append("fp8=%s" % fp8)
        if scale:
            load.append("scale=%d" % scale)
        if layers:
            load.append("layers=%d" % layers)
        if mtp:
            load.append("mtp=1")
        h = ctypes.c_uint64()
        check(_lib.lib().m2n_model_prepare(self._handle(), cstr(model), cstr(trainer), cstr(generator),
                                           cstr(",".join(load)),
                                           cstr(_route(route, balance, net_bw, local_bw, latency)), ctypes.byref(h)))
        return Model(self, h.value)

    def close(self):
        """Closes the session, its calls and models. Every rank closes its
        session after its last step (or uses `with`); a peer still waiting
        in, or later entering, a collective this rank never joined raises
        LeftError naming this rank. A session open at exit is left then
        (the peers learn that this rank's program ended with it open)."""
        if self._h:
            h, self._h = self._h, 0
            _forget(self)
            check(_lib.lib().m2n_session_close(h))

    def leave(self, why):
        """Leaves the session after a failure of this rank's own program
        (why: what failed), closing it: every peer waiting in, or later
        entering, a collective this rank never joined raises LeftError at
        once, naming this rank and why, instead of waiting out the timeout.
        Not collective. The job is then failed, as after an abort: at exit
        the package ends it (MPI_Abort) rather than letting MPI_Finalize
        wait for peers that abort. The package calls it itself on an
        uncaught exception (then ends the job) and at exit; `with` calls it
        when its block raises."""
        if self._h:
            h, self._h = self._h, 0
            _forget(self)
            check(_lib.lib().m2n_session_leave(h, cstr(why)))

    def _gone(self):
        """The C library left this session (a call used after closing it):
        forget the handle."""
        self._h = 0
        _forget(self)

    def __enter__(self):
        return self

    def __exit__(self, etype, value, tb):
        if etype is None:
            self.close()
            return
        global _left_on_error
        _left_on_error = True
        try:
            self.leave(_summary(etype, value, tb))
        except Error:
            pass  # the block's exception is the one to report


def _held(fn, h):
    """What m2n_call_held or m2n_model_held says, as a dict."""
    v, verified, intact = ctypes.c_uint64(), ctypes.c_int32(), ctypes.c_int32()
    check(fn(h, ctypes.byref(v), ctypes.byref(verified), ctypes.byref(intact)))
    return {"version": v.value, "verified": bool(verified.value), "intact": bool(intact.value)}


class Call:
    """A call prepared once and run every step (Session.prepare)."""

    def __init__(self, session, handle, tensors):
        self.session = session
        self.tensors = tensors
        self.names = [t.name for t in tensors]
        self._index = {n: i for i, n in enumerate(self.names)}
        self._h = handle
        self._closed = 0
        self._shapes = {}  # (tensor index, side) -> the shape its arrays must have

    def _handle(self, run=False):
        if self._h and self.session._h:
            return self._h
        if run and self._closed and self.session._h:
            # the C library leaves the session, naming this rank to the
            # peers that wait in this step, and raises InvalidArgument.
            try:
                check(_lib.lib().m2n_call_run(self._closed, None, 0, 0, None, None))
            finally:
                self.session._gone()
        raise InvalidArgument("the call (or its session) is closed")

    def _aligned(self, bufs, what):
        """bufs (a dict by tensor name, a sequence in call order, or None)
        as a list in call order, and a reason to refuse, if any."""
        if bufs is None:
            return [None] * len(self.names), None
        if isinstance(bufs, dict):
            unknown = [k for k in bufs if k not in self._index]
            if unknown:
                return None, "%s buffers for %s, which the call does not have (it has %s)" % (what, unknown, self.names)
            return [bufs.get(n) for n in self.names], None
        bufs = list(bufs)
        if len(bufs) != len(self.names):
            return None, "%d %s buffers for a call of %d tensors" % (len(bufs), what, len(self.names))
        return bufs, None

    @property
    def held(self):
        """What this rank's destination buffers hold: {"version": the last
        step that completed for every tensor on every rank (0: none yet),
        "verified": whether it ran with verify, "intact": False once a
        later step failed after its bytes began to move (never with
        atomic)}."""
        return _held(_lib.lib().m2n_call_held, self._handle())

    @property
    def version(self):
        """The version this rank's destination buffers hold complete (held's
        "version")."""
        return self.held["version"]

    def run(self, src=None, dst=None, stream=None, scale=None, version=None):
        """Moves one step (collective): src and dst hold this rank's local
        tensors (numpy arrays or torch tensors, CPU or CUDA as the session's
        device), by tensor name or in call order, for the tensors whose mesh
        has this rank; scale, for the tensors converted to FP8 on their
        destination ranks, the float32 arrays that receive their scales. Each must be contiguous, of the tensor's dtype and of
        exactly its local part's size; a bad one on any rank raises the
        same ValidationError on every rank, naming that rank, the tensor and
        the side. On CUDA, the step first waits for stream (default: torch's
        current stream of the tensors' device, else all of the GPU's work),
        and the destinations are written when run returns. Returns the
        report: completed and failed tensor names, seconds, and bytes by
        link. version (an int of at least 1, the same on every rank) is
        the version this step carries; without it, the last step's plus
        one (see held)."""
        lib = _lib.lib()
        h = self._handle(run=True)
        if version is not None:
            check(lib.m2n_call_set_version(h, version))
        s = self.session
        srcs, why = self._aligned(src, "source")
        dsts, why2 = self._aligned(dst, "destination")
        scales, why3 = self._aligned(scale, "scale")
        why = why or why2 or why3
        if why:
            check(lib.m2n_call_refuse(h, -1, 0, cstr(why)))
        n = len(self.names)
        arr = (_lib.TensorBuffers * max(1, n))()
        keep = []  # the buffers' dtype strings, alive through the call
        for i, t in enumerate(self.tensors):
            for side, x in (("src", srcs[i]), ("dst", dsts[i]), ("scale", scales[i])):
                b, why = buffer(x, t.side_dtype(side), _lib.SRC if side == "src" else _lib.DST, s.device, s.cuda_device,
                                shape=self._want_shape(i, side) if x is not None else None)
                keep.append(b)
                if why:
                    check(lib.m2n_call_refuse(h, i, _lib.SRC if side == "src" else _lib.DST,
                                              cstr(why if side != "scale" else "scale buffer " + why)))
                setattr(arr[i], side, b)
        rep = _lib.Report()
        done = (ctypes.c_uint8 * max(1, n))()
        stream = _stream(stream, srcs + dsts + scales) if s.device == "cuda" else 0
        code = lib.m2n_call_run(h, arr, n, stream, ctypes.byref(rep), done)
        check(code)
        out = {"completed": [m for i, m in enumerate(self.names) if done[i]],
               "failed": [m for i, m in enumerate(self.names) if not done[i]]}
        out.update(_report(rep))
        return out

    def _want_shape(self, i, side):
        """The shape tensor i's array on a side must have on this rank: its
        part's local shape (its block grid box for "scale"), or None where
        a view places the part in a larger buffer or the rank holds none."""
        key = (i, side)
        if key not in self._shapes:
            t = self.tensors[i]
            try:
                if side == "scale":
                    p = t.scale_part(self.session.rank)
                    self._shapes[key] = None if p is None else p[0]
                elif t.views[0 if side == "src" else 1] is not None:
                    self._shapes[key] = None
                else:
                    self._shapes[key] = t.local_shape(side, self.session.rank)
            except Error:
                self._shapes[key] = None  # the library's buffer check says what is wrong, on every rank
        return self._shapes[key]

    def local_shape(self, name, side):
        """This rank's local shape of a tensor's side, or None."""
        return self.tensors[self._index[name]].local_shape(side, self.session.rank)

    def empty(self, side, lib="numpy", device=None):
        """Uninitialised local buffers of this rank for a side ("src",
        "dst", or "scale": the scales of the tensors converted to FP8), by
        tensor name (numpy, bf16 and fp8 as raw integers, or torch)."""
        out = {}
        for t in self.tensors:
            if side == "scale":
                p = t.scale_part(self.session.rank)
                shape = None if p is None else p[0]
            else:
                shape = t.local_shape(side, self.session.rank)
            if shape is not None:
                n = 1
                for d in shape:
                    n *= d
                out[t.name] = empty(t.side_dtype(side), n, lib, device).reshape(shape)
        return out

    def describe(self):
        """The schedule: route (as chosen), note, fingerprint, rounds,
        messages, tensors."""
        return _describe(_lib.lib().m2n_call_describe, self._handle())

    def close(self):
        """Frees the call. Running it afterwards, while its session is open,
        leaves the session (the peers waiting in that step raise LeftError
        naming this rank) and raises InvalidArgument."""
        if self._h and self.session._h:
            h, self._h = self._h, 0
            self._closed = h
            check(_lib.lib().m2n_call_close(h))
        self._h = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _buffer_shapes(b, side):
    """The shapes an array for a model buffer b (Model.buffers) may have:
    1-dim of its elements, or the shape of what it holds where that is one
    array: a scale tensor's block grid box, or the local shape of a buffer
    that holds one part, dense from its start. None (any shape of its size)
    for a fused buffer, whose shape the model does not define."""
    if b is None:
        return None
    flat = (b["elems"],)
    if side == "scale":
        return [flat, tuple(b["shape"])] if tuple(b["shape"]) != flat else [flat]
    parts = b.get("parts") or []
    if len(parts) != 1:
        return None
    p = parts[0]
    local = tuple(p["local_shape"])
    dense, acc = [], 1
    for d in reversed(local):
        dense.insert(0, acc)
        acc *= d
    if p["view_offset"] != 0 or acc != b["elems"] or (acc > 0 and list(p["view_strides"]) != dense):
        return None
    return [flat, local] if local != flat else [flat]


class Model:
    """A whole model prepared on a session (Session.prepare_model): one call
    per pipeline stage, fused weights moved in place. info describes it;
    buffers(side) lists this rank's buffers by name."""

    def __init__(self, session, handle):
        self.session = session
        self._h = handle
        self._closed = 0
        self.info = _describe(_lib.lib().m2n_model_describe, handle)

    def _handle(self, run=False):
        if self._h and self.session._h:
            return self._h
        if run and self._closed and self.session._h:
            try:  # as Call._handle: the C library leaves the session
                check(_lib.lib().m2n_model_run(self._closed, None, 0, None, 0, None, 0, 0, None))
            finally:
                self.session._gone()
        raise InvalidArgument("the model (or its session) is closed")

    def buffers(self, side):
        """This rank's buffers on a side ("src" or "dst"), by name, as the
        trainer (Megatron-Core) and generator (vLLM) hold them; none on a
        side the rank is not on. Each is a dict:

        - "name", "stage" (the pipeline stage it belongs to), "dtype",
          "elems", "bytes": a 1-dim buffer of elems elements (Model.run
          takes it 1-dim, or for a buffer of one dense part, in that part's
          local shape);
        - "tensors": the model tensors whose parts it holds, in order (a
          fused buffer holds several: Megatron's linear_qkv interleaves each
          query group's q, k and v heads, vLLM's qkv_proj holds [q; k; v],
          gate_up_proj and the experts' w13 [gate; up]);
        - "parts": for each of those tensors, where this rank's part of it
          sits: "tensor" (its name); "shape" (its global shape, as
          transformers holds the parameter); "layout_shape" (the row-major
          reshape of shape that both sides shard, equal to shape for most
          tensors); "local_shape" and "offset" (this rank's box of
          layout_shape: the part's shape and its global offset, as DTensor
          computes them); "view_offset" and "view_strides" (in elements:
          element (i0, i1, ...) of the part is element view_offset + i0 *
          view_strides[0] + i1 * view_strides[1] + ... of the buffer).
          parts(side, arrays) gives those views.

        "scale": the scale tensors of the tensors converted to FP8, by name
        (the tensor's with _scale_inv), each {"tensor", "stage", "bytes",
        "shape", "offset" (its box of the tensor's block grid), "dtype":
        "float32", "elems"}."""
        if side == "scale":
            return {b["name"]: dict(b, dtype="float32", elems=b["bytes"] // 4) for b in self.info["scale"]}
        key = "src" if _side(side) == _lib.SRC else "dst"
        return {b["name"]: b for b in self.info[key]}

    def parts(self, side, arrays):
        """{entry: the view of its part} for this rank's buffers on a side,
        arrays mapping buffer names to arrays as Model.run takes them (numpy
        or torch, as from empty()): each view is the strided view of its
        buffer that a part's "view_offset" and "view_strides" describe, of
        the part's "local_shape", to fill the sources or read the
        destinations. A part's "entry" is its tensor's name, or, for a piece
        of a tensor that a framework splits otherwise than torch.chunk
        (vocabulary padding, uneven expert parallelism), "name[lo:hi]": a
        rank may hold several pieces of one tensor. A buffer not in arrays
        is skipped."""
        out = {}
        for name, b in self.buffers(side).items():
            if name not in arrays:
                continue
            flat = arrays[name].reshape(-1)
            for p in b["parts"]:
                shape, strides, off = tuple(p["local_shape"]), tuple(p["view_strides"]), p["view_offset"]
                if is_torch(flat):
                    out[p["entry"]] = flat.as_strided(shape, strides, flat.storage_offset() + off)
                else:
                    from numpy.lib.stride_tricks import as_strided
                    out[p["entry"]] = as_strided(flat[off:], shape=shape, strides=tuple(x * flat.itemsize for x in strides),
                                                  writeable=flat.flags.writeable)
        return out

    def empty(self, side, lib="numpy", device=None):
        """Uninitialised buffers of this rank for a side ("src", "dst" or
        "scale"), by name, 1-dim."""
        return {name: empty(b["dtype"], b["elems"], lib, device) for name, b in self.buffers(side).items()}

    @property
    def held(self):
        """Call.held for the whole model on this rank: the lowest of its
        stages' versions, verified and intact where every stage's is."""
        return _held(_lib.lib().m2n_model_held, self._handle())

    @property
    def version(self):
        """The version of the model this rank's buffers hold (held's
        "version")."""
        return self.held["version"]

    def run(self, src=None, dst=None, stream=None, scale=None, version=None):
        """Moves one step of the whole model (collective), every pipeline
        stage at once: src, dst and scale map this rank's buffer names
        (buffers()) to numpy arrays or torch tensors of exactly their size
        (1-dim, or a buffer of one dense part in that part's local shape;
        a fused buffer in any shape of its size). Returns the report:
        "completed" and "failed" count the whole model's tensors, every
        stage's, the same on every rank; "seconds" is this rank's slowest
        stage; the byte and message counts are this rank's, summed over the
        stages it is in (a trainer rank's own stage, every stage for a
        generator rank). version: the version the step carries, as in
        Call.run."""
        lib = _lib.lib()
        h = self._handle(run=True)
        if version is not None:
            check(lib.m2n_model_set_version(h, version))
        s = self.session
        kept, named = [], []
        for side, bufs in (("src", src or {}), ("dst", dst or {}), ("scale", scale or {})):
            listed = self.buffers(side)
            arr = (_lib.NamedBuffer * max(1, len(bufs)))()
            for i, (name, x) in enumerate(bufs.items()):
                want = listed[name]["dtype"] if name in listed else "u8"
                b, why = buffer(x, want, _lib.SRC if side == "src" else _lib.DST, s.device, s.cuda_device,
                                shapes=_buffer_shapes(listed.get(name), side))
                kept.append(b)
                if why:
                    what = {"src": "source", "dst": "destination", "scale": "scale"}[side]
                    check(lib.m2n_model_refuse(h, cstr("%s buffer %r %s" % (what, name, why))))
                arr[i].name = cstr(name)
                arr[i].buffer = b
            kept.append(arr)
            named.append((arr, len(bufs)))
        rep = _lib.Report()
        every = [x for d in (src, dst, scale) for x in (d or {}).values()]
        stream = _stream(stream, every) if s.device == "cuda" else 0
        check(lib.m2n_model_run(h, named[0][0], named[0][1], named[1][0], named[1][1], named[2][0], named[2][1], stream,
                                ctypes.byref(rep)))
        out = {"completed": rep.completed, "failed": rep.failed}
        out.update(_report(rep))
        self._last_dst = dst or {}
        return out

    def refresh_targets(self):
        """The tensors this rank holds for the generator that need the
        generator's post-load step after every step, each {"tensor",
        "buffer", "stage", "why"}: vLLM derives state from them once, when it
        loads a checkpoint (MLA's kv_b_proj: W_UK_T and W_UV, in
        process_weights_after_loading), or holds them in another dtype than
        the trainer (GLM-4.5's float32 router), so writing them in place is
        not enough. Empty on trainer ranks and for models without such
        tensors. See docs/python.md."""
        return [dict(e) for e in self.info.get("refresh", [])]

    def refresh(self, hook):
        """Runs the generator's post-load step after a step (call it on every
        generator rank after run()): hook(module, entries, buffers) once per
        module that needs it, module the transformers module path above the
        tensors' own ("model.layers.3.self_attn" for its kv_b_proj,
        "model.layers.3.mlp" for its gate),
        entries its refresh_targets(), buffers the destination buffers of
        the last run() by name. vllm_refresh_hook(model) makes the hook a
        vLLM worker uses. Returns how many modules it refreshed."""
        groups = {}
        for e in self.refresh_targets():
            groups.setdefault(e["tensor"].rsplit(".", 2)[0] if e["tensor"].endswith(".weight")
                              else e["tensor"].rsplit(".", 1)[0], []).append(e)
        last = getattr(self, "_last_dst", {})
        for module in sorted(groups):
            entries = groups[module]
            hook(module, entries, {e["buffer"]: last[e["buffer"]] for e in entries if e["buffer"] in last})
        return len(groups)

    def close(self):
        if self._h and self.session._h:
            h, self._h = self._h, 0
            self._closed = h
            check(_lib.lib().m2n_model_close(h))
        self._h = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def vllm_refresh_hook(model, act_dtype=None):
    """The refresh hook of a vLLM worker whose model (the torch module vLLM
    built, e.g. llm.llm_engine.model_executor.driver_worker.model_runner.model,
    or what a worker extension reaches) m2n writes into: for an MLA layer
    it reruns the attention modules' process_weights_after_loading(act_dtype)
    under the layer's self_attn (what vLLM's loader does once after loading:
    vllm/model_executor/model_loader/utils.py, process_weights_after_loading;
    act_dtype defaults to the kv_b_proj weight's dtype), re-deriving W_UK_T and
    W_UV from the new kv_b_proj; for a router vLLM holds in float32 it copies
    the delivered weight into the parameter of the same name. Use it as
    m.refresh(m2n.vllm_refresh_hook(model)) after every m.run()."""
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())

    def hook(module, entries, buffers):
        for e in entries:
            if e["tensor"].endswith(".mlp.gate.weight") and e["tensor"] in params:
                p = params[e["tensor"]]
                b = buffers.get(e["buffer"])
                if b is None:
                    raise InvalidArgument("refresh of %s: its buffer %s was not given to the last run()" %
                                          (e["tensor"], e["buffer"]))
                p.data.copy_(_as_torch(b, p).view(p.shape))
        if not any(e["tensor"].endswith("kv_b_proj.weight") for e in entries):
            return
        dtype = act_dtype
        if dtype is None:
            kvb = [e["tensor"] for e in entries if e["tensor"].endswith("kv_b_proj.weight")][0]
            dtype = params[kvb].dtype if kvb in params else None
        done = 0
        for name, sub in modules.items():
            if name.startswith(module + ".") and hasattr(sub, "process_weights_after_loading") and hasattr(sub, "impl"):
                sub.process_weights_after_loading(dtype)
                done += 1
        if done == 0:
            raise InvalidArgument("refresh of %s: no attention module with process_weights_after_loading under it" % module)

    return hook


def _as_torch(buf, like):
    """buf (a torch tensor or numpy array) as a torch tensor on like's device."""
    if hasattr(buf, "to") and hasattr(buf, "dtype") and not hasattr(buf, "__array_interface__"):
        return buf.to(like.device)
    import torch
    return torch.from_numpy(buf).to(like.device)


# The sessions open in this process, and whether one was left because its
# `with` block raised: an uncaught exception then ends the whole job.
_open = []
_left_on_error = False


def _forget(session):
    if session in _open:
        _open.remove(session)


def _world_rank():
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return mpi.COMM_WORLD.Get_rank() if mpi is not None else None
    except Exception:
        return None


def _summary(etype, value, tb):
    """One line for a peer: the exception and where it was raised."""
    where = ""
    if tb is not None:
        frames = traceback.extract_tb(tb)
        if frames:
            f = frames[-1]
            where = " (at %s:%d in %s)" % (os.path.basename(f.filename), f.lineno, f.name)
    if etype is not None and issubclass(etype, SystemExit):
        return "its program exited (SystemExit(%r))%s" % (getattr(value, "code", None), where)
    text = "".join(traceback.format_exception_only(etype, value)).strip().replace("\n", " ")
    return "uncaught %s%s" % (text, where)


def _leave_all(why, wait=5.0):
    """Leaves every open session, giving up after wait seconds (another
    thread may be inside a step of one, which the library waits for)."""
    sessions = list(_open)

    def leave():
        for s in sessions:
            try:
                s.leave(why)
            except Exception:
                pass

    try:
        t = threading.Thread(target=leave, daemon=True)
        t.start()
    except RuntimeError:  # no new threads while the interpreter finalises (Python 3.12+, at exit)
        leave()
        return
    t.join(wait)


_previous_excepthook = sys.excepthook


def _excepthook(etype, value, tb):
    """An uncaught exception with a session open (or left by its `with`
    block) ends the whole job, as `python -m mpi4py` does: its traceback
    printed once, with the rank; every open session left, so that the peers
    waiting in one of its collectives raise LeftError naming this rank and
    the exception at once; then MPI_Abort after a short grace (for them to
    report it)."""
    if not _open and not _left_on_error:
        _previous_excepthook(etype, value, tb)
        return
    rank = _world_rank()
    if rank is None and _open:
        rank = _open[0].rank
    try:
        sys.stderr.write("m2n: rank %s: uncaught exception with an m2n session open: leaving the session (its peers "
                         "raise m2n.LeftError naming this rank) and ending the job (MPI_Abort):\n" % rank)
        _previous_excepthook(etype, value, tb)
        sys.stderr.flush()
        sys.stdout.flush()
        _leave_all(_summary(etype, value, tb))
        time.sleep(1.0)  # with the library's grace: 2 s for the peers to report it
    finally:
        _lib.lib().m2n_abort_job(1)


sys.excepthook = _excepthook


@atexit.register
def _at_exit():
    """At exit: leave every session still open (the peers learn that this
    rank's program ended with it open), and after an abort end the job
    instead of letting mpi4py's MPI_Finalize wait for peers that are gone
    (Python's atexit runs before it)."""
    if _lib._lib is None:
        return
    if _open:
        _leave_all("its program ended with the session open (m2n.Session.close was never called)")
    if _lib._lib.m2n_job_failed():
        sys.stdout.flush()
        sys.stderr.flush()
        _lib._lib.m2n_abort_job(1)
