"""cupy: xseg as CuPy's allocator, without preloading anything.

    import cupy, xseg
    cupy.cuda.set_allocator(xseg.cupy_allocator())

CuPy's cupy.cuda.memory.CFunctionAllocator takes a param pointer and two C
functions, ``void *malloc(void *param, size_t size, int device)`` and
``void free(void *param, void *ptr, int device)``; libxseg exports them as
xseg_cupy_malloc / xseg_cupy_free (lib/foreign.c), served by the
process-wide allocator of the device, the same one memory_stats() and
empty_cache() see.  The param is the stream the memory is used on (0: the
legacy default stream, CuPy's default): when CuPy runs on another stream,
pass its handle (``cupy.cuda.get_current_stream().ptr``) so that a freed
block is reused in that stream's order.  See docs/preload.md.
"""
import ctypes

from . import _lib
from ._lib import XsegError

# CuPy's signatures (cupy/cuda/memory.pyx: malloc_func_type, free_func_type).
MALLOC_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
FREE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def entry_points():
    """(malloc address, free address) of libxseg's CuPy entry points."""
    lib = _lib.load()
    for name in ("xseg_cupy_malloc", "xseg_cupy_free"):
        if not hasattr(lib, name):
            raise XsegError(f"xseg: {_lib.path()} has no {name} (a libxseg older than "
                            "issue 17); rebuild it")
    return _lib.address("xseg_cupy_malloc"), _lib.address("xseg_cupy_free")


def _import_cupy():
    try:
        import cupy  # noqa: F401  (optional: only this function needs it)
        from cupy.cuda import memory
    except ImportError as e:
        raise XsegError(f"xseg.cupy_allocator: CuPy is not importable ({e})") from e
    return memory


def cupy_allocator(stream=0, checked=True):
    """An allocator for cupy.cuda.set_allocator, backed by xseg.

    stream: the stream handle (int) the memory is used on; 0 is the legacy
    default stream.  checked: wrap CuPy's CFunctionAllocator so that a failed
    allocation raises cupy.cuda.memory.OutOfMemoryError with xseg's message
    (CFunctionAllocator alone would hand out a NULL pointer); False gives the
    bare CFunctionAllocator's malloc (one Python call less per allocation).
    """
    memory = _import_cupy()
    malloc_addr, free_addr = entry_points()
    inner = memory.CFunctionAllocator(int(stream or 0), malloc_addr, free_addr, _lib.load())
    if not checked:
        return inner.malloc

    def malloc(size):
        ptr = inner.malloc(size)
        if size and not int(ptr.ptr):
            err = memory.OutOfMemoryError(size, -1)
            why = _lib.last_error()
            if why:
                err.args = (f"{err.args[0] if err.args else 'out of memory'} (xseg: {why})",)
            raise err
        return ptr

    malloc.xseg_inner = inner
    return malloc
