"""Sessions and calls over the C library (whole models: model.py)."""

import atexit
import ctypes
import numbers
import os
import sys
import threading
import time
import traceback

from . import _lib
from ._run import _delta, _describe, _held, _report, _stream
from .buffers import buffer, cstr, empty
from .errors import Error, InvalidArgument, check
from .model import Model
from .placement import Tensor


def _route(route, balance=None, net_bw=None, local_bw=None, latency=None):
    """The route string of m2n.h: "name[:key=value,...]"."""
    params = [("balance", balance), ("net_bw", net_bw), ("local_bw", local_bw), ("latency", latency)]
    extra = ",".join("%s=%s" % (k, repr(v) if isinstance(v, float) else v) for k, v in params if v is not None)
    return (route or "hier") + (":" + extra if extra else "")


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
    sub-nanosecond values are refused). delta=True: delta mode (CPU
    sessions; a "cuda" session raises ValidationError naming delta): each
    step of a call after its first sends only the elements that changed
    since the step before, per block, dense where that is smaller (see
    Call.resync, and "delta" and "dense" in Call.run's report). The other
    options are m2n_options' (m2n.h). An option this rank cannot read fails every
    rank's Session(...) at once with a ValidationError naming it. Close it
    (or use `with`) on every rank after its last step; a rank that leaves
    early (an uncaught exception, a call used after closing it, a program
    ending with the session open) is named to its peers, which raise
    LeftError at their next collective."""

    def __init__(self, comm=None, device="cpu", timeout=None, verify=False, atomic=False, stripe=False,
                 chunk_bytes=0, staging_bytes=0, coalesce_bytes=0, src_domain_size=0, dst_domain_size=0,
                 emulate_net_bw=0.0, delta=False, _link=None):
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
            o.delta = int(bool(delta))
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
        one (see held). In delta mode (Session(delta=True)) the
        destinations are updated in place: pass the same dst arrays every
        step, holding what the last step delivered. The report's "delta"
        says whether the step sent deltas (False for a full sync: the first
        step, the one after resync(), the one after a failed step that was
        not atomic, every step of a session not in delta mode), and
        "dense" ({"network", "local", "copied"}) what its sends and copies
        move dense, a full sync's bytes, against "sent" and "copied": what
        they moved on this rank."""
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
        out.update(_delta(lib.m2n_call_delta_report, h))
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

    def resync(self):
        """Makes the next step a full sync in delta mode, every element
        sent dense, as the first step is (after this rank's destination
        arrays were changed outside the call, say). Not collective: one
        rank asking is enough, every rank's next step is then a full sync.
        It does nothing on a session not in delta mode."""
        check(_lib.lib().m2n_call_resync(self._handle()))

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
