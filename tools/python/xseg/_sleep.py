"""_sleep: tags, sleep and wake (docs/sleep.md) over libxseg's C API.

A tag names a kind of memory ("weights", "kv", ...).  `with xseg.tag(name):`
pushes it on the calling thread's tag stack, so that the allocations the
thread makes meanwhile (PyTorch's too, once xseg.install() made xseg its
allocator) belong to it.  xseg.sleep() gives back the physical memory under
the blocks of some tags, live ones included, and keeps their addresses;
xseg.wake_up() maps memory there again (and restores what a backup sleep
saved).  Both act on the process-wide allocator of a device (xseg_default).

Under PyTorch with xseg installed the calls go through xseg_torch_sleep /
xseg_torch_wake, where the name "graphs" stands for every CUDA-graph pool of
the device; otherwise through xseg_sleep / xseg_wake with tag ids.  Every
function is looked up when first called, so a libxseg without one of them
fails with a message naming it, not at import.
"""
import contextlib
import ctypes
import threading

from . import _lib, _stats
from ._lib import XsegError
from ._stats_struct import XsegCounter

c_int, c_size_t, c_void_p, c_char_p = (
    ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p)
u32, i32, u64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64

MAX_TAGS = 32          # XSEG_MAX_TAGS
TAG_NAME_MAX = 32      # XSEG_TAG_NAME_MAX, with the NUL
ERR_ASLEEP = 15        # XSEG_ERR_ASLEEP: the tag's memory is asleep
ERR_STATE = 16         # XSEG_ERR_STATE: not possible in the current state
MODES = {"discard": 0, "backup": 1}   # xseg_sleep_mode
MODE_NAMES = {v: k for k, v in MODES.items()}
GRAPHS = "graphs"      # xseg_torch_sleep's name for the CUDA-graph pools


class TagStats(ctypes.Structure):
    """struct xseg_tag_stats (include/xseg.h), field for field."""
    _fields_ = [("size", u32), ("tag", i32), ("name", ctypes.c_char * TAG_NAME_MAX),
                ("asleep", i32), ("mode", i32),
                ("live_bytes", XsegCounter), ("mapped_bytes", XsegCounter),
                ("sleeping_bytes", u64), ("backup_bytes", u64),
                ("sleeps", u64), ("wakes", u64),
                ("last_sleep_ns", u64), ("last_wake_ns", u64)]


# name: (restype, argtypes); declared on first use (see fn()).
_PROTOTYPES = {
    "xseg_tag_id": (c_int, [c_char_p, ctypes.POINTER(c_int)]),
    "xseg_tag_name": (c_char_p, [c_int]),
    "xseg_tag_push": (c_int, [c_int]),
    "xseg_tag_pop": (c_int, []),
    "xseg_tag_current": (c_int, []),
    "xseg_alloc_tagged": (c_int, [c_void_p, c_size_t, c_void_p, c_int,
                                  ctypes.POINTER(c_void_p)]),
    "xseg_tag_of": (c_int, [c_void_p, c_void_p, ctypes.POINTER(c_int)]),
    "xseg_sleep": (c_int, [c_void_p, ctypes.POINTER(c_int), c_size_t, c_int]),
    "xseg_wake": (c_int, [c_void_p, ctypes.POINTER(c_int), c_size_t]),
    "xseg_tag_stats_get": (c_int, [c_void_p, c_int, ctypes.POINTER(TagStats)]),
    "xseg_torch_sleep": (c_int, [c_int, ctypes.POINTER(c_char_p), c_size_t, c_int]),
    "xseg_torch_wake": (c_int, [c_int, ctypes.POINTER(c_char_p), c_size_t]),
}

_lock = threading.Lock()
_declared = set()
_graphs_asleep = set()   # devices whose graph pools this module put to sleep


def fn(name):
    """The library function `name`, declared; XsegError if it lacks it."""
    lib = _lib.load()
    f = getattr(lib, name, None)
    if f is None:
        raise XsegError(
            f"xseg: {_lib.path()} (libxseg {_lib.version()}) has no {name}(); this "
            "Python package needs a newer libxseg (rebuild it from the same source tree, "
            "or point XSEG_LIBRARY at one)")
    if name not in _declared:
        f.restype, f.argtypes = _PROTOTYPES[name]
        _declared.add(name)
    return f


def check(status, what):
    """XsegError for a non-zero status, with the library's name of the
    status and xseg_last_error(); the status is in the error's .status."""
    try:
        _lib.check(status, what)
    except XsegError as e:
        e.status = status
        raise


# ---- the registry and the thread's stack ----

def tag_id(name):
    """The id of tag `name` (registered on first use); an int passes if
    registered.  "default" is 0."""
    if isinstance(name, int) and not isinstance(name, bool):
        if fn("xseg_tag_name")(name) is None:
            raise XsegError(f"xseg: tag {name} is not registered (name tags by string)")
        return name
    if not isinstance(name, str):
        raise TypeError(f"xseg: a tag is a name (str), not {type(name).__name__}")
    out = c_int(-1)
    check(fn("xseg_tag_id")(name.encode(), ctypes.byref(out)), f"xseg_tag_id({name!r})")
    return out.value


def tag_name(tag_id_):
    """Name of a registered tag id, None if none."""
    raw = fn("xseg_tag_name")(tag_id_)
    return raw.decode() if raw is not None else None


def registered():
    """Names of every registered tag, in id order (the registry has no holes)."""
    out = []
    for t in range(MAX_TAGS):
        name = tag_name(t)
        if name is None:
            break
        out.append(name)
    return out


def current_tag():
    """Name of the calling thread's current tag ("default" when none)."""
    return tag_name(fn("xseg_tag_current")())


class tag(contextlib.ContextDecorator):  # noqa: N801 (used like a function)
    """`with xseg.tag("weights"):` or `@xseg.tag("weights")`: the calling
    thread's allocations inside belong to the tag.  Pushed on entry, popped
    on exit, exceptions included; nests (the innermost wins).  The name
    "graphs" is kept for the CUDA-graph pools, whose memory is tagged by
    capture, not by a tag stack."""

    def __init__(self, name):
        if name == GRAPHS:
            raise ValueError(
                'xseg.tag("graphs"): the name "graphs" stands for the CUDA-graph pools '
                "(their memory is what torch.cuda.graph captures allocate); pick another")
        self.name = name
        self.id = tag_id(name)

    def __enter__(self):
        check(fn("xseg_tag_push")(self.id), f"xseg_tag_push({self.name!r})")
        return self

    def __exit__(self, exc_type, exc, tb):
        top = fn("xseg_tag_current")()
        check(fn("xseg_tag_pop")(), f"xseg_tag_pop (leaving xseg.tag({self.name!r}))")
        if top != self.id and exc_type is None:
            raise XsegError(
                f"xseg.tag({self.name!r}): the thread's tag stack was unbalanced inside "
                f"the block (tag {tag_name(top)!r} on top at its end, a push without pop)")
        return False

    def __repr__(self):
        return f"xseg.tag({self.name!r})"


# ---- sleep and wake ----

def _names(tags):
    if isinstance(tags, (str, int)):
        tags = (tags,)
    out = []
    for t in tags:
        name = t if isinstance(t, str) else tag_name(tag_id(t))
        if name in out:
            raise ValueError(f"xseg: tag {name!r} is named twice")
        out.append(name)
    if not out:
        raise ValueError("xseg: no tag named")
    return out


def _mode_value(mode, name):
    if isinstance(mode, int) and mode in MODE_NAMES:
        return mode
    if mode not in MODES:
        raise ValueError(f"xseg: sleep mode {mode!r} for tag {name!r} is neither "
                         '"discard" nor "backup"')
    return MODES[mode]


def plan(tags=None, mode="backup"):
    """{tag name: mode number} of a sleep call (sleep()'s arguments)."""
    if isinstance(mode, dict):
        names = _names(tuple(mode) if tags is None else tags)
        missing = [n for n in names if n not in mode]
        if missing:
            raise ValueError(f"xseg.sleep: no mode given for tag(s) {missing} in {mode!r}")
        return {n: _mode_value(mode[n], n) for n in names}
    names = _names(("weights",) if tags is None else tags)
    return {n: _mode_value(mode, n) for n in names}


def _torch_mode():
    from . import _torch  # noqa: PLC0415 (avoids a cycle at import)
    return _torch.installed()


def _via_torch(names):
    """xseg_torch_sleep/_wake when PyTorch uses xseg; without "graphs", a
    libxseg lacking them is served by xseg_sleep/_wake (same allocator)."""
    if not _torch_mode():
        return False
    return GRAPHS in names or hasattr(_lib.load(), "xseg_torch_sleep")


def _ids(names):
    if GRAPHS in names:
        raise XsegError(
            'xseg: the tag "graphs" (CUDA-graph pools) sleeps and wakes only through '
            "PyTorch with xseg as its allocator (xseg.install())")
    return [tag_id(n) for n in names]


def _c_ids(ids):
    return (c_int * len(ids))(*ids)


def sleep_allocator(xs, modes):
    """xseg_sleep on allocator `xs` (a c_void_p) for {name: mode number},
    backup tags first; all or nothing (a later group failing wakes the
    earlier one again)."""
    return _grouped(modes, lambda names, m: _sleep_ids(xs, names, m),
                    lambda names: wake_allocator(xs, names))


def _sleep_ids(xs, names, mode):
    ids = _ids(names)
    check(fn("xseg_sleep")(xs, _c_ids(ids), len(ids), mode),
          f"xseg_sleep({names}, {MODE_NAMES[mode]})")


def wake_allocator(xs, names):
    """xseg_wake on allocator `xs` for the tags `names`."""
    ids = _ids(names)
    check(fn("xseg_wake")(xs, _c_ids(ids), len(ids)), f"xseg_wake({names})")


def _grouped(modes, do_sleep, undo):
    done = []
    for m in (MODES["backup"], MODES["discard"]):  # backup first: undoing it loses nothing
        names = [n for n, v in modes.items() if v == m]
        if not names:
            continue
        try:
            do_sleep(names, m)
        except XsegError as e:
            if done:
                with contextlib.suppress(XsegError):
                    undo(done)
                e.args = (f"{e.args[0]} (the tags {done} put to sleep before it were "
                          "woken again)",)
            raise
        done.extend(names)
    return tuple(done)


def _c_names(names):
    return (c_char_p * len(names))(*(n.encode() for n in names))


def _torch_sleep(device, modes):
    def do_sleep(names, m):
        check(fn("xseg_torch_sleep")(device, _c_names(names), len(names), m),
              f"xseg_torch_sleep(device {device}, {names}, {MODE_NAMES[m]})")
        if GRAPHS in names:
            _graphs_asleep.add(device)
    return _grouped(modes, do_sleep, lambda names: _torch_wake(device, names))


def _torch_wake(device, names):
    check(fn("xseg_torch_wake")(device, _c_names(names), len(names)),
          f"xseg_torch_wake(device {device}, {names})")
    if GRAPHS in names:
        _graphs_asleep.discard(device)


def sleep(tags=None, mode="backup", device=None):
    """Put the memory of `tags` of a device to sleep.

    tags: a name or names (default ("weights",); with a dict `mode`, its
    keys).  mode: "backup" (the default: copied to pinned host memory,
    restored on wake: weights), "discard" (contents lost: KV caches,
    scratch), or a dict
    {tag: mode}.  Addresses stay valid; until wake_up(), allocations of
    those tags raise/fail with XSEG_ERR_ASLEEP and kernels touching them
    fault.  All or nothing.  Returns the names put to sleep."""
    modes = plan(tags, mode)
    with _lock:
        if _via_torch(modes):
            return _torch_sleep(_stats.device_index(device), modes)
        return sleep_allocator(_stats.allocator(device), modes)


def asleep_tags(xs):
    """Names of the registered tags asleep on allocator `xs`."""
    return [n for n, s in stats_allocator(xs).items() if s["asleep"]]


def wake_up(tags=None, device=None):
    """Wake the memory of `tags` of a device (None: every tag asleep, the
    CUDA-graph pools included when this module put them to sleep): memory
    is mapped at the same addresses again and backups are restored.  On
    failure (out of memory) the tags stay asleep and the call can be made
    again.  Returns the names woken ((), when nothing was asleep)."""
    with _lock:
        if tags is None:
            names = asleep_tags(_stats.allocator(device))
            if _torch_mode() and _stats.device_index(device) in _graphs_asleep:
                names.append(GRAPHS)
            if not names:
                return ()
        else:
            names = _names(tags)
        if _via_torch(names):
            _torch_wake(_stats.device_index(device), names)
        else:
            wake_allocator(_stats.allocator(device), names)
        return tuple(names)


# ---- statistics ----

def raw_tag_stats(xs, tag_id_):
    """The TagStats of one tag of allocator `xs` (checked against the size
    the library writes back)."""
    s = TagStats()
    s.size = ctypes.sizeof(TagStats)
    check(fn("xseg_tag_stats_get")(xs, tag_id_, ctypes.byref(s)),
          f"xseg_tag_stats_get(tag {tag_id_})")
    if s.size != ctypes.sizeof(TagStats):
        raise XsegError(
            f"xseg: the library filled {s.size} bytes of struct xseg_tag_stats, the Python "
            f"mirror has {ctypes.sizeof(TagStats)}: library and package differ")
    return s


def as_dict(s):
    return {"id": s.tag,
            "live_bytes": s.live_bytes.current, "live_peak_bytes": s.live_bytes.peak,
            "mapped_bytes": s.mapped_bytes.current, "mapped_peak_bytes": s.mapped_bytes.peak,
            "sleeping_bytes": s.sleeping_bytes, "backup_bytes": s.backup_bytes,
            "asleep": bool(s.asleep), "mode": MODE_NAMES.get(s.mode, str(s.mode)),
            "sleeps": s.sleeps, "wakes": s.wakes,
            "last_sleep_s": s.last_sleep_ns / 1e9, "last_wake_s": s.last_wake_ns / 1e9}


def stats_allocator(xs):
    """{name: stats dict} of every registered tag of allocator `xs`."""
    return {name: as_dict(raw_tag_stats(xs, t)) for t, name in enumerate(registered())}


def tag_stats(device=None):
    """{tag name: dict(live_bytes, live_peak_bytes, mapped_bytes,
    mapped_peak_bytes, sleeping_bytes, backup_bytes, asleep, mode, sleeps,
    wakes, last_sleep_s, last_wake_s, id)} for every registered tag of the
    device's allocator ("default": the untagged memory).  A tag the
    allocator never used reads zero.  The CUDA-graph pools are in
    xseg.graph_pools()."""
    return stats_allocator(_stats.allocator(device))


INT_FIELDS = ("live_bytes", "live_peak_bytes", "mapped_bytes", "mapped_peak_bytes",
              "sleeping_bytes", "backup_bytes", "sleeps", "wakes")


def _used(s):
    return s.live_bytes.total or s.mapped_bytes.total or s.sleeps or s.asleep


def tag_keys(device=None):
    """memory_stats() keys "tags.<name>.<field>" (ints) for each named tag the
    device's allocator has used ("default", the untagged memory, is the
    rest of the top-level figures).  {} with a libxseg without tags."""
    if not hasattr(_lib.load(), "xseg_tag_stats_get"):
        return {}
    xs = _stats.allocator(device)
    out = {}
    for t, name in enumerate(registered()):
        if t == 0:
            continue
        s = raw_tag_stats(xs, t)
        if not _used(s):
            continue
        d = as_dict(s)
        for f in INT_FIELDS:
            out[f"tags.{name}.{f}"] = d[f]
        out[f"tags.{name}.asleep"] = int(s.asleep)
        out[f"tags.{name}.mode"] = int(s.mode)
        out[f"tags.{name}.last_sleep_ns"] = s.last_sleep_ns
        out[f"tags.{name}.last_wake_ns"] = s.last_wake_ns
    return out
