"""Whole models over the C library (Session.prepare_model)."""

import ctypes

from . import _lib
from ._run import _delta, _describe, _held, _report, _stream
from .buffers import buffer, cstr, empty, is_torch
from .errors import InvalidArgument, check
from .placement import _side


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
        Call.run. "delta" and "dense" are Call.run's, summed over the
        stages ("delta": every stage's step sent deltas)."""
        lib = _lib.lib()
        h = self._handle(run=True)
        if version is not None:
            check(lib.m2n_model_set_version(h, version))
        s = self.session
        kept = []
        named = [self._named(side, bufs or {}, kept) for side, bufs in (("src", src), ("dst", dst), ("scale", scale))]
        rep = _lib.Report()
        every = [x for d in (src, dst, scale) for x in (d or {}).values()]
        stream = _stream(stream, every) if s.device == "cuda" else 0
        check(lib.m2n_model_run(h, named[0][0], named[0][1], named[1][0], named[1][1], named[2][0], named[2][1], stream,
                                ctypes.byref(rep)))
        out = {"completed": rep.completed, "failed": rep.failed}
        out.update(_report(rep))
        out.update(_delta(lib.m2n_model_delta_report, h))
        self._last_dst = dst or {}
        return out

    def _named(self, side, bufs, kept):
        """bufs (buffer names to arrays) as the C library's named buffers
        of a side, and their count; kept keeps what they point into. A
        buffer that does not fit is refused on every rank
        (m2n_model_refuse: the next collective fails everywhere)."""
        s, h = self.session, self._handle()
        listed = self.buffers(side)
        arr = (_lib.NamedBuffer * max(1, len(bufs)))()
        for i, (name, x) in enumerate(bufs.items()):
            want = listed[name]["dtype"] if name in listed else "u8"
            b, why = buffer(x, want, _lib.SRC if side == "src" else _lib.DST, s.device, s.cuda_device,
                            shapes=_buffer_shapes(listed.get(name), side))
            kept.append(b)
            if why:
                what = {"src": "source", "dst": "destination", "scale": "scale"}[side]
                check(_lib.lib().m2n_model_refuse(h, cstr("%s buffer %r %s" % (what, name, why))))
            arr[i].name = cstr(name)
            arr[i].buffer = b
        kept.append(arr)
        return arr, len(bufs)

    def lora(self, rank, alpha=0, targets=None, route="hier"):
        """The LoRA adapters of this model, prepared as a model of their own
        (collective): an A [rank, in] and a B [out, rank] for every dense
        projection named in targets (transformers' module names; default
        q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj),
        named as PEFT names them ("model.layers.0.self_attn.q_proj.lora_A.weight"),
        held as Megatron-Bridge's CanonicalLoRA trains them (A split over
        TP by its rank rows, or by columns for o_proj and down_proj; B by
        rows) and as vLLM's LoRA layers hold them (A whole and B split as
        the weight's rows for column-parallel projections; A split by
        columns and B whole for row-parallel ones). Its buffers() and run()
        are a model's: run moves the adapters only. After each run, every
        generator rank calls merge_lora. alpha 0 means alpha = rank. A model
        whose generator holds FP8 raises ValidationError where a generator
        rank's part of an adapted weight cuts a scale block; else merge_lora
        re-quantizes the blocks (pass the scale buffers as its scale)."""
        h = ctypes.c_uint64()
        check(_lib.lib().m2n_model_lora(self._handle(), rank, float(alpha), cstr(",".join(targets or [])), cstr(route),
                                        ctypes.byref(h)))
        return Model(self.session, h.value)

    def merge_lora(self, adapters, dst, adapter_dst, scale=None):
        """Merges what this rank's destination buffers of adapters (a
        Model from lora(), adapter_dst as given to its last run) hold into
        this rank's destination buffers of this model (dst), in place:
        each weight part gains its part of alpha/rank x (B @ A) less the
        previous merge's product, so the weights are the ones the adapters
        were trained on plus the latest adapters (one float32 sum per
        element, rounded once to bfloat16). Local to this rank (no
        collective): call it on every generator rank after each adapter
        step; trainer ranks have nothing to merge.

        For a model served in FP8 (prepare_model's fp8=), scale holds this
        rank's scale tensors by name, as run() takes them (empty("scale")):
        each adapted float8_e4m3fn weight part and its float32 scales are
        rewritten in place as Q(D(Wq0) + alpha/rank x (B @ A)), from the
        FP8 base Wq0 the first merge with these adapters found (the full
        sync's bytes and scales, which the library keeps): D decodes each
        byte times its block's scale in float32, and Q re-quantizes every
        block as the in-flight conversion does (amax x float32(1/448) as
        the scale, each element divided by it and rounded to E4M3), so a
        step's weight depends only on the base and the latest adapters. A
        rank holding FP8 weights that gives no scales raises
        InvalidArgument (m2n_model_merge_lora_scales in C)."""
        kept = []
        w, n = self._named("dst", dst or {}, kept)
        sc, ns = self._named("scale", scale or {}, kept)
        a, na = adapters._named("dst", adapter_dst or {}, kept)
        check(_lib.lib().m2n_model_merge_lora_scales(self._handle(), adapters._handle(), w, n, sc, ns, a, na))

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

    def resync(self):
        """Call.resync for every stage of the model this rank is in: their
        next step is a full sync. A generator rank is in every stage, so
        one generator rank asking resyncs the whole model (after its
        buffers were changed outside the model, say); a trainer rank
        asking resyncs its own pipeline stage only."""
        check(_lib.lib().m2n_model_resync(self._handle()))

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
