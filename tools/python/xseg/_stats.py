"""_stats: xseg's statistics per device, as torch.cuda.memory_stats() keys
where the concept is the same, plus xseg's own under "xseg.*"."""
import collections
import ctypes
import json
import sys

from . import _lib
from ._stats_struct import COUNTERS, OP_MAP, OP_UNMAP, OPS, SCALARS, new_stats

# torch family -> xseg counter.  torch's "allocation" counts live
# allocations; "active" also counts blocks whose free waits on
# record_stream uses, which xseg already counts as freed (see
# docs/pytorch.md), so both read active_blocks.
TORCH_FAMILIES = {
    "allocated_bytes": "allocated_bytes",
    "requested_bytes": "requested_bytes",
    "reserved_bytes": "mapped_bytes",
    "allocation": "active_blocks",
    "active": "active_blocks",
    "active_bytes": "allocated_bytes",
}


def device_index(device=None):
    """Device number from None (PyTorch's current device, else 0), an int,
    "cuda[:N]" or a torch.device."""
    if device is None:
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return int(torch.cuda.current_device())
        except (AttributeError, RuntimeError):
            pass
        return 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        _, _, num = device.partition(":")
        return int(num) if num else device_index(None)
    index = getattr(device, "index", None)
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"xseg: expected a CUDA device, got {device!r}")
    return device_index(None) if index is None else int(index)


def allocator(device=None):
    """The process-wide xseg_t* of a device (created on first use)."""
    lib = _lib.load()
    xs = ctypes.c_void_p()
    d = device_index(device)
    _lib.check(lib.xseg_default(d, ctypes.byref(xs)), f"xseg_default({d})")
    return xs


def raw_stats(device=None):
    """The XsegStats struct of a device."""
    s = new_stats()
    _lib.check(_lib.load().xseg_get_stats(allocator(device), ctypes.byref(s)),
               "xseg_get_stats")
    return s


def _family(out, name, c):
    out[f"{name}.all.current"] = c.current
    out[f"{name}.all.peak"] = c.peak
    out[f"{name}.all.allocated"] = c.total
    out[f"{name}.all.freed"] = c.total - c.current


def torch_keys(s):
    """The torch.cuda.memory_stats() keys that xseg can fill, from a struct."""
    out = {}
    for fam, field in TORCH_FAMILIES.items():
        _family(out, fam, getattr(s, field))
    out["num_alloc_retries"] = s.alloc_retries
    out["num_ooms"] = s.ooms
    out["num_device_alloc"] = s.driver_calls[OP_MAP]
    out["num_device_free"] = s.driver_calls[OP_UNMAP]
    return out


def xseg_keys(s):
    """xseg's own statistics as "xseg.*" keys."""
    out = {}
    for name in COUNTERS:
        c = getattr(s, name)
        for part in ("current", "peak", "total"):
            out[f"xseg.{name}.{part}"] = getattr(c, part)
    for i, op in enumerate(OPS):
        out[f"xseg.driver_calls.{op}"] = s.driver_calls[i]
    for name in SCALARS:
        out[f"xseg.{name}"] = getattr(s, name)
    return out


def memory_stats(device=None):
    """Like torch.cuda.memory_stats(device): a flat, sorted dict of ints;
    "tags.<name>.*" for each named tag the device's allocator has used."""
    from . import _sleep  # noqa: PLC0415 (_sleep imports this module)
    s = raw_stats(device)
    out = torch_keys(s)
    out.update(xseg_keys(s))
    out.update(_sleep.tag_keys(device))
    return collections.OrderedDict(sorted(out.items()))


def _render(fn_name, device):
    lib = _lib.load()
    fn = getattr(lib, fn_name)
    xs = allocator(device)
    need = ctypes.c_size_t(0)
    cap = 4096
    while True:
        buf = ctypes.create_string_buffer(cap)
        st = fn(xs, buf, cap, ctypes.byref(need))
        if st == 13 and need.value + 1 > cap:  # XSEG_ERR_BUFFER_TOO_SMALL
            cap = need.value + 1
            continue
        _lib.check(st, fn_name)
        return buf.value.decode()


def stats_json(device=None):
    """xseg_stats_json() of a device, as a string."""
    return _render("xseg_stats_json", device)


def stats_dict(device=None):
    return json.loads(stats_json(device))


def snapshot_json(device=None):
    """xseg_snapshot_json(): every block, handle and page of the device's
    allocator (a debugging aid: it walks everything)."""
    return _render("xseg_snapshot_json", device)


def history_json(device=None):
    """xseg_history_json(): the recorded events (conf `history:N`)."""
    return _render("xseg_history_json", device)


def graph_pools(device=None):
    """The CUDA-graph pools of a device (None: every device) as a dict:
    pools, in_use, failed, mapped_bytes, live_blocks, live_bytes."""
    info = _lib.TorchPoolsInfo()
    dev = -1 if device is None else device_index(device)
    _lib.check(_lib.load().xseg_torch_pools(dev, ctypes.byref(info)), "xseg_torch_pools")
    return {name: getattr(info, name) for name, _ in info._fields_}


def prometheus(device=None):
    """xseg_stats_prometheus(): text exposition format for /metrics."""
    return _render("xseg_stats_prometheus", device)


def backend(device=None):
    return _lib.load().xseg_backend_name(allocator(device)).decode()


def reset_peak_stats(device=None):
    """Peaks back to the current values (torch.cuda.reset_peak_memory_stats)."""
    _lib.check(_lib.load().xseg_reset_peak(allocator(device)), "xseg_reset_peak")


def set_expected_peak(nbytes, device=None):
    """xseg_set_expected_peak(): release_threshold:auto counts on at least
    `nbytes` live bytes from now on (0: no hint; docs/config.md,
    expected_peak).  For a program that measures its peak as it runs, for
    example torch.cuda.max_memory_allocated() after a profile pass, then
    empty_cache() so that the layout starts again with the peak known."""
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"xseg.set_expected_peak: {nbytes} bytes: a peak is >= 0")
    _lib.check(_lib.load().xseg_set_expected_peak(allocator(device), nbytes),
               "xseg_set_expected_peak")


def trim(device=None, keep=0, wait=True):
    """Give the cached memory of one device's allocator back beyond `keep`
    bytes and return the bytes: released (wait=True, xseg_trim), or handed
    to the reclaim worker, which releases them while Python goes on
    (wait=False, xseg_trim_start; with reclaim:sync the same as wait=True)."""
    lib = _lib.load()
    fn, name = (lib.xseg_trim, "xseg_trim") if wait else (lib.xseg_trim_start, "xseg_trim_start")
    out = ctypes.c_size_t(0)
    _lib.check(fn(allocator(device), int(keep), ctypes.byref(out)), name)
    return out.value


def empty_cache():
    """Return cached memory of every device xseg serves to the driver
    (torch.cuda.empty_cache() calls the same hook once installed)."""
    lib = _lib.load()
    lib.xseg_torch_reset()
    msg = _lib.last_error()
    if msg:
        raise _lib.XsegError(f"xseg empty_cache: {msg}")
