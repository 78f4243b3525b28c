"""Exceptions: one class per kind of Go error, each carrying the message
(which names the rank, the tensor and the field, as the Go errors do) and
the structured detail."""

import ctypes
import json

from . import _lib


class Error(Exception):
    """An m2n error. Attributes: code (M2N_ERR_*), kind (the Go error type,
    such as "ValidationError"), chain (every m2n error type it wraps,
    outermost first), message, and, where the error says, rank, tensor,
    side, field; detail holds everything as a dict."""

    def __init__(self, message, detail=None):
        super().__init__(message)
        self.message = message
        self.detail = dict(detail or {})
        self.code = self.detail.get("code", _lib.ERR_OTHER)
        self.kind = self.detail.get("kind", type(self).__name__)
        self.chain = list(self.detail.get("chain", []))
        self.rank = self.detail.get("rank")
        self.tensor = self.detail.get("tensor")
        self.side = self.detail.get("side")
        self.field = self.detail.get("field")


class InvalidArgument(Error, ValueError):
    """A bad argument found on this rank alone, before any collective."""


class ValidationError(Error, ValueError):
    """Inputs that cannot work, agreed by every rank: each raises the lowest
    failing rank's error (a bad shape, placement, dtype, buffer or view).
    The session stays usable."""


class AgreementError(Error):
    """Ranks were given different inputs: names the first rank and field
    that differ (detail: value, want, differing). The session stays usable."""


class ChecksumError(Error):
    """With verify, a message arrived with another checksum than it was sent
    with."""


class AbortError(Error):
    """A rank gave up and the session aborted; close it and end the job
    (the package ends it at exit rather than let MPI_Finalize wait)."""


class TimeoutError(AbortError):  # noqa: A001 (m2n.TimeoutError, as Go's reshard.TimeoutError)
    """A rank waited past the timeout (detail: peers, the ranks it waited
    for; phase): the session aborted."""


class LeftError(AbortError):
    """A peer left the session (closed it, or its program failed: an
    uncaught exception, a call used after closing it, a program that ended
    with the session open) before a collective this rank waits in, which it
    will never join: names that rank (e.rank, in the session's numbering)
    and why (detail: cause, phase). The session aborted."""


class CallMismatchError(Error):
    """Ranks ran different calls of the session at once, or different steps
    of one call (a rank that ran call a where another ran call b; two
    threads whose calls the ranks serialised in different orders): every
    rank raises it before a byte moves, naming the first rank that differs
    (e.rank), the call and step it began (e.call, e.step) and rank 0's
    (e.want, e.want_step). No destination changed and no step counted; the
    session stays usable. Every rank must run a session's calls in the same
    order, one step each."""

    def __init__(self, message, detail=None):
        super().__init__(message, detail)
        self.call = self.detail.get("call")
        self.step = self.detail.get("step")
        self.want = self.detail.get("want")
        self.want_step = self.detail.get("want_step")
        self.differing = self.detail.get("differing")


class Unavailable(Error):
    """A CUDA session where there is no CUDA driver, GPU or NCCL."""


class InternalError(Error):
    """A bug in m2n, caught at the C boundary."""


_BY_CODE = {
    _lib.ERR_INVALID: InvalidArgument,
    _lib.ERR_VALIDATION: ValidationError,
    _lib.ERR_AGREEMENT: AgreementError,
    _lib.ERR_CHECKSUM: ChecksumError,
    _lib.ERR_TIMEOUT: TimeoutError,
    _lib.ERR_ABORT: AbortError,
    _lib.ERR_UNAVAILABLE: Unavailable,
    _lib.ERR_INTERNAL: InternalError,
    _lib.ERR_CALL_MISMATCH: CallMismatchError,
    _lib.ERR_LEFT: LeftError,
}


def _read(fn):
    n = fn(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    fn(buf, n + 1)
    return buf.value.decode("utf-8", "replace")


def last_error(code):
    """The exception for the calling thread's last failed call."""
    lib = _lib.lib()
    message = _read(lib.m2n_last_error)
    try:
        detail = json.loads(_read(lib.m2n_last_error_detail) or "{}")
    except ValueError:
        detail = {}
    detail.setdefault("code", code)
    return _BY_CODE.get(code, Error)(message, detail)


def check(code):
    """Raises the last error if code is not M2N_OK."""
    if code != _lib.OK:
        raise last_error(code)
