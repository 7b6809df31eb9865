"""share: hand xseg memory to another process (docs/sharing.md, issue 15).

Over ctypes, with the process-wide allocator of a device (xseg_default: the
one PyTorch uses after xseg.install()):

    # exporter                                # importer
    ptr = share.alloc_shareable(nbytes)       desc = share.recv(sock)
    desc = share.export_ptr(ptr)              ptr = share.import_desc(desc)
    share.send(sock, desc)                    desc.close()
    desc.close()                              ...  (read and write it)
    ...                                       share.unimport(ptr)
    share.free(ptr)     # safe at any time

Only dedicated blocks are exported (one physical handle, never cached):
alloc_shareable (xseg_alloc_registrable), or any allocation of at least the
conf's `registrable_min`.  An ordinary allocation is refused.  A
description (ExportDesc) carries file descriptors: it travels only over a
Unix socket (send / recv use SCM_RIGHTS), and whoever holds one closes it
(desc.close(), or `with desc:`).  The importer maps the block read-write;
the exporter may free it at any time (the memory lives until the last
importer unmaps it), and a block freed before its import is refused, as is
a forged or damaged description, another device's block, or a block this
process already imported.  Failures raise xseg.XsegError with xseg's
message.

With torch (imported only by these functions):

    t = share.empty_shareable((4096, 4096), torch.bfloat16)   # exporter
    share.send_tensor(sock, t)              # the description + shape/dtype
    u = share.recv_tensor(sock)             # importer: a tensor on the block
    # or by hand: desc = share.export_tensor(t); share.open_tensor(desc, shape, dtype)

The tensors are made through DLPack (torch.from_dlpack over a capsule made
here): their storage's deleter frees the block (empty_shareable) or unmaps
it (open_tensor) when torch lets the storage go, on the thread that lets
it go.  Synchronise the streams that use a tensor before dropping it:
xseg's free of a dedicated block waits only for the stream it was
allocated on.  On the host backend (tests) the tensors are CPU tensors over
the host backend's memory; on cuda they are CUDA tensors of the device.
"""
import ctypes
import json
import math
import socket
import struct
import sys
import threading

from . import _lib, _stats

c_int, c_size_t, c_void_p, u8, u32, i32, u64 = (
    ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint32,
    ctypes.c_int32, ctypes.c_uint64)

EXPORT_MAGIC = 0x58534558  # "XSEX", XSEG_EXPORT_MAGIC
EXPORT_VERSION = 1
EXPORT_MAX_PIECES = 8


class ExportPiece(ctypes.Structure):
    """xseg_export_piece: `size` bytes at `offset` into the block, behind fd."""
    _fields_ = [("fd", i32), ("reserved", u32), ("offset", u64), ("size", u64)]


class ExportDesc(ctypes.Structure):
    """xseg_export_desc (include/xseg.h).  Its descriptors belong to whoever
    holds it: close() (or a with block) closes them once sent or imported."""
    _fields_ = [("magic", u32), ("version", u32), ("device", i32), ("pid", i32),
                ("uuid", u8 * 16), ("size", u64), ("requested", u64), ("nonce", u64),
                ("handle_type", u32), ("npieces", u32), ("token_fd", i32),
                ("token_slot", u32), ("check", u64), ("pieces", ExportPiece * EXPORT_MAX_PIECES)]

    def close(self):
        """Close its descriptors (idempotent: they become -1)."""
        _fn("xseg_export_close")(ctypes.byref(self))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"<xseg.share.ExportDesc {self.size} bytes ({self.requested} asked) of device "
                f"{self.device}, process {self.pid}, {self.npieces} piece(s)>")


class ShareStats(ctypes.Structure):
    """xseg_share_stats."""
    _fields_ = [("size", u32), ("handle_types", u32), ("peers", u64)] + [
        (n, u64 * 3) for n in ("dedicated_blocks", "dedicated_bytes", "imported_blocks",
                               "imported_bytes")] + [
        ("exports", u64), ("exported_live", u64), ("refused_imports", u64),
        ("why", ctypes.c_char * 160)]


_P = ctypes.POINTER
_PROTOTYPES = {  # name: (restype, argtypes)
    "xseg_alloc_registrable": (c_int, [c_void_p, c_size_t, c_void_p, _P(c_void_p)]),
    "xseg_free": (c_int, [c_void_p, c_void_p]),
    "xseg_block_size": (c_int, [c_void_p, c_void_p, _P(c_size_t), _P(c_size_t)]),
    "xseg_export": (c_int, [c_void_p, c_void_p, _P(ExportDesc)]),
    "xseg_export_close": (None, [_P(ExportDesc)]),
    "xseg_send_export": (c_int, [c_int, _P(ExportDesc)]),
    "xseg_recv_export": (c_int, [c_int, _P(ExportDesc)]),
    "xseg_import": (c_int, [c_void_p, _P(ExportDesc), _P(c_void_p)]),
    "xseg_unimport": (c_int, [c_void_p, c_void_p]),
    "xseg_enable_peer": (c_int, [c_void_p, c_int]),
    "xseg_share_stats_get": (c_int, [c_void_p, _P(ShareStats)]),
}
_fns = {}
_fns_lock = threading.Lock()


def _fn(name):
    """The library function `name` with its prototype (a function object of
    this module's own: the library's shared attributes are left alone)."""
    with _fns_lock:
        f = _fns.get(name)
        if f is None:
            lib = _lib.load()
            if not hasattr(lib, name):
                raise _lib.XsegError(f"xseg.share: this libxseg has no {name} (built before "
                                     "sharing, issue 15); rebuild it")
            res, args = _PROTOTYPES[name]
            f = _fns[name] = ctypes.CFUNCTYPE(res, *args)((name, lib))
        return f


def _xs(device):
    return _stats.allocator(device)


def _hex(ptr):
    return f"{ptr:#x}" if isinstance(ptr, int) else repr(ptr)


def _fileno(sock):
    return sock if isinstance(sock, int) else sock.fileno()


# ---- raw memory (ctypes) ----

def alloc_shareable(nbytes, device=None, stream=None):
    """A dedicated block of at least nbytes (rounded to the registration
    granularity; one physical handle), for `stream` (an int handle or None).
    Returns its address; free it with free()."""
    if int(nbytes) <= 0:
        raise ValueError(f"xseg.share.alloc_shareable: {nbytes} bytes (must be > 0)")
    out = c_void_p()
    _lib.check(_fn("xseg_alloc_registrable")(_xs(device), int(nbytes), stream, ctypes.byref(out)),
               f"xseg_alloc_registrable({nbytes})")
    return out.value


def free(ptr, device=None):
    """xseg_free of a block of the device's allocator (waits for the streams
    that used a dedicated block)."""
    _lib.check(_fn("xseg_free")(_xs(device), ptr), f"xseg_free({_hex(ptr)})")


def block_size(ptr, device=None):
    """(rounded, requested) bytes of the live block at ptr."""
    r, q = c_size_t(), c_size_t()
    _lib.check(_fn("xseg_block_size")(_xs(device), ptr, ctypes.byref(r), ctypes.byref(q)),
               f"xseg_block_size({_hex(ptr)})")
    return r.value, q.value


def export_ptr(ptr, device=None):
    """The description of the dedicated block that starts at ptr, with
    descriptors of its own (close it once sent)."""
    d = ExportDesc()
    _lib.check(_fn("xseg_export")(_xs(device), ptr, ctypes.byref(d)),
               f"xseg_export({_hex(ptr)})")
    return d


def send(sock, desc):
    """Send a description over a connected Unix socket (socket or fd); the
    descriptors travel with it (SCM_RIGHTS).  desc stays the caller's."""
    _lib.check(_fn("xseg_send_export")(_fileno(sock), ctypes.byref(desc)), "xseg_send_export")


def recv(sock):
    """Receive one description (with new descriptors, the caller's to close)."""
    d = ExportDesc()
    _lib.check(_fn("xseg_recv_export")(_fileno(sock), ctypes.byref(d)), "xseg_recv_export")
    return d


def import_desc(desc, device=None):
    """Map the described block read-write in this process; returns its
    address here (unimport() it).  desc's descriptors stay the caller's."""
    out = c_void_p()
    _lib.check(_fn("xseg_import")(_xs(device), ctypes.byref(desc), ctypes.byref(out)),
               f"xseg_import({desc.size} bytes of process {desc.pid})")
    return out.value


def unimport(ptr, device=None):
    """Unmap a block import_desc() mapped (its memory lives on elsewhere)."""
    _lib.check(_fn("xseg_unimport")(_xs(device), ptr), f"xseg_unimport({_hex(ptr)})")


def enable_peer(peer, device=None):
    """Give device `peer` access to every mapping of `device`'s allocator."""
    _lib.check(_fn("xseg_enable_peer")(_xs(device), int(peer)), f"xseg_enable_peer({peer})")


def share_stats(device=None):
    """xseg_share_stats_get as a dict (counters as {current, peak, total})."""
    s = ShareStats()
    s.size = ctypes.sizeof(s)
    _lib.check(_fn("xseg_share_stats_get")(_xs(device), ctypes.byref(s)), "xseg_share_stats_get")
    out = {}
    for name, _ in ShareStats._fields_:
        v = getattr(s, name)
        if name == "why":
            out[name] = v.decode(errors="replace")
        elif name != "size":
            out[name] = (dict(zip(("current", "peak", "total"), v))
                         if isinstance(v, ctypes.Array) else int(v))
    return out


def check_view(desc, nbytes, offset=0):
    """Refuse a view of nbytes at offset that the described block does not
    hold (its `requested` bytes): a ValueError naming the numbers."""
    if offset < 0 or nbytes < 0 or offset + nbytes > desc.requested:
        raise ValueError(f"xseg.share: a view of {nbytes} bytes at offset {offset} does not fit "
                         f"the shared block's {desc.requested} bytes (of process {desc.pid})")


# ---- torch tensors over DLPack ----

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", u8), ("bits", u8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int),
                ("dtype", _DLDataType), ("shape", _P(ctypes.c_int64)),
                ("strides", _P(ctypes.c_int64)), ("byte_offset", u64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, _P(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p),
                             ("deleter", _DELETER)]
_KDL_CPU, _KDL_CUDA, _KDL_UINT = 1, 2, 1
_CAPSULE_NAME = b"dltensor"  # kept alive: the capsule points at it
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, ctypes.c_char_p, c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_live = {}  # address of a _DLManagedTensor -> (it, its shape, its strides, on_free)
_live_lock = threading.Lock()


def _deleted(managed):
    """DLPack deleter: torch let the storage go (any thread, GIL held)."""
    try:
        with _live_lock:
            entry = _live.pop(ctypes.addressof(managed.contents), None)
        if entry is not None:
            entry[3]()
    except Exception as e:  # noqa: BLE001 (never unwind into torch)
        try:
            sys.stderr.write(f"xseg.share: giving a tensor's block back failed: {e}\n")
        except Exception:  # noqa: BLE001 (at exit, sys.stderr may be gone)
            pass


_deleter = _DELETER(_deleted)


def _torch():
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError as e:
        raise _lib.XsegError("xseg.share: the tensor helpers need torch") from e
    return torch


def _dl_device(device):
    """(DLPack device type, id) of the device's allocator: CUDA on cuda,
    CPU on the host backend (its memory is the process's own)."""
    d = _stats.device_index(device)
    return (_KDL_CPU, 0) if _stats.backend(d) == "host" else (_KDL_CUDA, d)


def _bytes_tensor(ptr, nbytes, device, on_free):
    """A 1-D uint8 tensor of nbytes at ptr whose storage calls on_free()
    when torch lets it go."""
    torch = _torch()
    shape = (ctypes.c_int64 * 1)(nbytes)
    strides = (ctypes.c_int64 * 1)(1)
    m = _DLManagedTensor()
    dev_type, dev_id = _dl_device(device)
    m.dl_tensor = _DLTensor(ptr, _DLDevice(dev_type, dev_id), 1, _DLDataType(_KDL_UINT, 8, 1),
                            shape, strides, 0)
    m.deleter = _deleter
    with _live_lock:
        _live[ctypes.addressof(m)] = (m, shape, strides, on_free)
    try:
        capsule = _new_capsule(ctypes.addressof(m), _CAPSULE_NAME, None)
        return torch.from_dlpack(capsule)
    except BaseException:
        with _live_lock:
            _live.pop(ctypes.addressof(m), None)  # not consumed: the caller gives it back
        raise


def _itemsize(dtype):
    torch = _torch()
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _view(raw, shape, dtype, offset=0):
    """raw (uint8 over the block) seen as a contiguous tensor of shape/dtype
    at byte offset."""
    n = math.prod(shape) * _itemsize(dtype)
    return raw[offset:offset + n].view(dtype).view(tuple(shape))


def empty_shareable(shape, dtype=None, device=None, stream=None):
    """An uninitialised contiguous tensor on a new dedicated block of the
    device's allocator (exportable with export_tensor / send_tensor); the
    block is freed when torch lets the tensor's storage go.  stream: the
    int handle the block is used on (default: torch's current stream of
    the device on cuda)."""
    torch = _torch()
    dtype = dtype or torch.float32
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    d = _stats.device_index(device)
    nbytes = math.prod(shape) * _itemsize(dtype)
    if stream is None and _dl_device(d)[0] == _KDL_CUDA:
        stream = torch.cuda.current_stream(d).cuda_stream
    ptr = alloc_shareable(max(nbytes, 1), d, stream)
    try:
        raw = _bytes_tensor(ptr, max(nbytes, 1), d, lambda: free(ptr, d))
    except BaseException:
        free(ptr, d)
        raise
    return _view(raw, shape, dtype)


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def export_tensor(t):
    """The description of the dedicated block under tensor t's storage
    (empty_shareable, or a tensor of at least `registrable_min` bytes)."""
    d = t.device.index if t.device.type == "cuda" else None
    return export_ptr(_storage_ptr(t), d)


def open_tensor(desc, shape, dtype, device=None, offset=0):
    """Import the described block and view it as a contiguous tensor of
    shape/dtype at byte offset; the block is unmapped when torch lets the
    storage go.  desc's descriptors stay the caller's."""
    shape = tuple(int(s) for s in shape)
    check_view(desc, math.prod(shape) * _itemsize(dtype), offset)
    d = _stats.device_index(device)
    ptr = import_desc(desc, d)
    try:
        raw = _bytes_tensor(ptr, desc.requested, d, lambda: unimport(ptr, d))
    except BaseException:
        unimport(ptr, d)
        raise
    return _view(raw, shape, dtype, offset)


def _send_all(sock, data):
    s = sock if isinstance(sock, socket.socket) else socket.socket(fileno=_fileno(sock))
    try:
        s.sendall(data)
    finally:
        if s is not sock:
            s.detach()


def _recv_all(sock, n):
    s = sock if isinstance(sock, socket.socket) else socket.socket(fileno=_fileno(sock))
    try:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise _lib.XsegError(f"xseg.share: the socket closed after {len(buf)} of {n} "
                                     "bytes of a tensor's description")
            buf += chunk
        return buf
    finally:
        if s is not sock:
            s.detach()


def send_tensor(sock, t):
    """Send tensor t's block (export_tensor) and its shape, dtype and byte
    offset in the block, for recv_tensor."""
    if not t.is_contiguous():
        raise ValueError("xseg.share.send_tensor: the tensor is not contiguous")
    offset = t.data_ptr() - _storage_ptr(t)
    meta = json.dumps({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                       "offset": offset}).encode()
    with export_tensor(t) as desc:
        send(sock, desc)
    _send_all(sock, struct.pack("<I", len(meta)) + meta)


def recv_tensor(sock, device=None):
    """The tensor send_tensor sent, opened in this process (open_tensor)."""
    torch = _torch()
    with recv(sock) as desc:
        (n,) = struct.unpack("<I", _recv_all(sock, 4))
        if n > 1 << 16:
            raise _lib.XsegError(f"xseg.share: a tensor description of {n} bytes (at most 65536)")
        meta = json.loads(_recv_all(sock, n))
        dtype = getattr(torch, meta["dtype"], None)
        if not isinstance(dtype, torch.dtype):
            raise _lib.XsegError(f"xseg.share: unknown dtype {meta['dtype']!r}")
        return open_tensor(desc, meta["shape"], dtype, device, int(meta["offset"]))
