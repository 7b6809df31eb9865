"""oom: an out-of-memory handler for a device's process-wide allocator
(C: xseg_set_oom_handler, issue 16).  A server evicts cache entries in it,
and the allocation that failed is retried once when it returns True:

    def evict(requested):          # bytes the failed allocation asked for
        return cache.drop_lru(requested) > 0
    xseg.oom.set_oom_handler(evict, device=0)

The handler runs on the allocating thread without xseg's lock held (it may
free tensors and allocate), is not re-entered on that thread, and an
exception in it counts as "no retry" (it is printed, not raised into the
allocator).  With the native PyTorch allocator, torch.OutOfMemoryError is
raised only after it declined.  None removes it."""
import ctypes
import sys
import threading

from . import _lib, _stats

HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

_lock = threading.Lock()
_handlers = {}  # device -> the CFUNCTYPE object (kept alive while installed)


def _wrap(fn):
    def call(_xs, requested, _user):
        try:
            return 1 if fn(int(requested)) else 0
        except Exception as e:  # noqa: BLE001 (never unwind through C)
            sys.stderr.write(f"xseg: the out-of-memory handler raised {e!r}; no retry\n")
            return 0
    return HANDLER(call)


def set_oom_handler(fn, device=None):
    """Install fn(requested_bytes) -> bool as the out-of-memory handler of
    the process-wide allocator of `device` (None: current); None removes."""
    lib = _lib.load()
    if not hasattr(lib, "xseg_set_oom_handler"):
        raise _lib.XsegError("xseg.oom: this libxseg has no xseg_set_oom_handler; rebuild it")
    d = _stats.device_index(device)
    xs = _stats.allocator(d)
    cb = _wrap(fn) if fn is not None else None
    with _lock:
        lib.xseg_set_oom_handler.argtypes = [ctypes.c_void_p, HANDLER, ctypes.c_void_p]
        lib.xseg_set_oom_handler.restype = ctypes.c_int
        _lib.check(lib.xseg_set_oom_handler(xs, cb if cb else HANDLER(), None),
                   f"xseg_set_oom_handler(device {d})")
        if cb is None:
            _handlers.pop(d, None)
        else:
            _handlers[d] = cb


def oom_handler_installed(device=None):
    return _stats.device_index(device) in _handlers
