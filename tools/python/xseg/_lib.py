"""_lib: finds and loads libxseg.so with ctypes and declares its functions.

Search order: the XSEG_LIBRARY environment variable (used alone when set),
the copy bundled in this package (xseg/libxseg.so.0, put there by
`pip install .` from the repository root), the installed library
(ctypes.util.find_library("xseg")), then the build directories of the
source tree (build*/lib).  library_path() says which one was loaded.
"""
import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

from ._stats_struct import TorchPoolsInfo, XsegStats

c_int, c_size_t, c_void_p, c_char_p, c_double = (
    ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double)


class XsegError(RuntimeError):
    """An xseg call failed, or xseg cannot be used as asked."""


# name: (restype, argtypes)
_PROTOTYPES = {
    "xseg_version": (c_char_p, []),
    "xseg_strerror": (c_char_p, [c_int]),
    "xseg_op_name": (c_char_p, [c_int]),
    "xseg_last_error": (c_char_p, []),
    "xseg_default": (c_int, [c_int, ctypes.POINTER(c_void_p)]),
    "xseg_backend_name": (c_char_p, [c_void_p]),
    "xseg_get_stats": (c_int, [c_void_p, ctypes.POINTER(XsegStats)]),
    "xseg_reset_peak": (c_int, [c_void_p]),
    "xseg_set_expected_peak": (c_int, [c_void_p, c_size_t]),
    "xseg_trim": (c_int, [c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_trim_start": (c_int, [c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_stats_json": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_stats_prometheus": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_snapshot_json": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_history_json": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t)]),
    "xseg_set_default_conf": (c_int, [c_char_p]),
    "xseg_torch_alloc": (c_void_p, [c_size_t, c_int, c_void_p]),
    "xseg_torch_free": (None, [c_void_p, c_size_t, c_int, c_void_p]),
    "xseg_torch_init": (None, [c_int]),
    "xseg_torch_reset": (None, []),
    "xseg_torch_memory_fraction": (None, [c_double, c_int]),
    "xseg_torch_record_stream": (None, [c_void_p, c_void_p]),
    "xseg_torch_pools": (c_int, [c_int, ctypes.POINTER(TorchPoolsInfo)]),
}

_lock = threading.Lock()
_loaded = {"lib": None, "path": None}


def bundled():
    """The copies a wheel built from the repository root carries."""
    here = Path(__file__).resolve().parent
    return [here / "libxseg.so.0", here / "libxseg.so"]


def _repo_candidates():
    here = Path(__file__).resolve().parent
    root = here.parents[2] if len(here.parents) > 2 else here
    builds = sorted(root.glob("build*/lib/libxseg.so.0"),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    yield from builds


def candidates():
    """Paths to try, in order (XSEG_LIBRARY alone when it is set)."""
    env = os.environ.get("XSEG_LIBRARY")
    if env:
        return [env]
    out = [str(p) for p in bundled() if p.exists()]
    found = ctypes.util.find_library("xseg")
    if found:
        out.append(found)
    out.extend(str(p) for p in _repo_candidates() if p.exists())
    return out


def _declare(lib):
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = res
        fn.argtypes = args


def _open(paths):
    errors = []
    for p in paths:
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append(f"{p}: {e}")
    where = "; ".join(errors) if errors else "no libxseg.so found"
    raise XsegError(
        "xseg: cannot load libxseg.so (" + where + "). Build it with "
        "`cmake -S . -B build && cmake --build build`, install it, or set "
        "XSEG_LIBRARY=/path/to/libxseg.so.0")


def _real_path(lib, fallback):
    """The file the dynamic loader actually opened (for PyTorch's CDLL)."""
    fn = getattr(lib, "xseg_version", None)
    info = _DlInfo()
    try:
        libdl = ctypes.CDLL(None)
        libdl.dladdr.argtypes = [c_void_p, ctypes.POINTER(_DlInfo)]
        if fn is not None and libdl.dladdr(ctypes.cast(fn, c_void_p), ctypes.byref(info)):
            return os.path.realpath(info.dli_fname.decode())
    except (AttributeError, OSError):
        pass
    return os.path.realpath(fallback) if os.path.exists(fallback) else fallback


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p),
                ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]


def load():
    """The loaded library (loads it on first call)."""
    with _lock:
        if _loaded["lib"] is None:
            lib, path = _open(candidates())
            if not hasattr(lib, "xseg_default"):
                raise XsegError(f"xseg: {path} is not libxseg (no xseg_default)")
            _declare(lib)
            _loaded["lib"], _loaded["path"] = lib, _real_path(lib, path)
        return _loaded["lib"]


def path():
    """Path of the loaded library file."""
    load()
    return _loaded["path"]


def last_error():
    """xseg_last_error() of this thread ("" if none)."""
    msg = load().xseg_last_error()
    return msg.decode(errors="replace") if msg else ""


def check(status, what):
    """Raise XsegError for a non-zero xseg_status."""
    if status != 0:
        lib = load()
        name = lib.xseg_strerror(status).decode()
        raise XsegError(f"{what} failed: {name}: {last_error()}")


def version():
    return load().xseg_version().decode()


def has(name):
    return hasattr(load(), name)


def address(name):
    """Address of an exported function, as PyTorch's hook setters take it."""
    return ctypes.cast(getattr(load(), name), c_void_p).value
