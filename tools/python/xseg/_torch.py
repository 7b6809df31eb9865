"""_torch: switches PyTorch to xseg through CUDAPluggableAllocator and
sets every hook that PyTorch offers and xseg implements."""
import threading

from . import _conf, _lib, _stats, _summary
from ._lib import XsegError

# PyTorch setter on the pluggable allocator -> exported xseg function.
HOOKS = (
    ("set_init_fn", "xseg_torch_init"),
    ("set_reset_fn", "xseg_torch_reset"),
    ("set_memory_fraction_fn", "xseg_torch_memory_fraction"),
    ("set_record_stream_fn", "xseg_torch_record_stream"),
    ("set_begin_allocate_to_pool", "xseg_torch_begin_pool"),
    ("set_end_allocate_to_pool_fn", "xseg_torch_end_pool"),
    ("set_release_pool", "xseg_torch_release_pool"),
)
GRAPH_HOOKS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")

_lock = threading.Lock()
_state = {"allocator": None, "conf": None, "hooks": (), "patched": False}


def import_torch():
    """torch, or XsegError saying that xseg.install() needs it."""
    try:
        import torch  # noqa: PLC0415 (imported on demand: torch is optional)
    except ImportError as e:
        raise XsegError(
            "xseg.install() needs PyTorch, and `import torch` failed "
            f"({e}). Install a CUDA build of PyTorch, or use libxseg from C "
            "(include/xseg.h); xseg.memory_stats() and friends work without it.") from e
    return torch


def check_fresh(torch):
    """Raise XsegError unless PyTorch's CUDA allocator can still be swapped."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not hasattr(getattr(torch, "_C", None), "_cuda_customAllocator"):
        raise XsegError(
            "xseg.install(): this PyTorch build has no CUDA support "
            f"(torch {getattr(torch, '__version__', '?')}); install a CUDA build.")
    if not hasattr(getattr(cuda, "memory", None), "CUDAPluggableAllocator"):
        raise XsegError(
            "xseg.install(): this PyTorch has no torch.cuda.memory.CUDAPluggableAllocator "
            f"(torch {getattr(torch, '__version__', '?')}); PyTorch 2.0 or newer is needed.")
    if cuda.is_initialized():
        raise XsegError(
            "xseg.install(): PyTorch has already initialised CUDA, so its own caching "
            f"allocator is in use{_held(cuda)}. Call xseg.install() at start-up, before "
            "the first CUDA tensor, model.to('cuda') or torch.cuda memory call (for a "
            "server: first thing in its start-up code, or via sitecustomize).")


def _held(cuda):
    try:
        n = int(cuda.memory_allocated())
    except Exception:  # noqa: BLE001 (best effort for the message only)
        return ""
    return f" and holds {n} bytes" if n else ""


def check_backend(text):
    if _conf.items(text).get("backend", "").lower() == "host":
        raise XsegError(
            "xseg.install(): the conf selects backend:host, whose memory is host memory "
            "that CUDA kernels cannot use; use backend:auto or backend:cuda with PyTorch.")


def set_hooks(handle):
    """Give PyTorch the address of each hook it has a setter for."""
    done = []
    for setter, symbol in HOOKS:
        fn = getattr(handle, setter, None)
        if fn is not None and _lib.has(symbol):
            fn(_lib.address(symbol))
            done.append(setter)
    return tuple(done)


def install(conf=None, patch_torch=True, native=False):
    """Switch PyTorch to xseg; call before PyTorch's first CUDA allocation.

    conf: None (XSEG_CONF), a "key:value,..." string or a dict
    (docs/config.md); verbose:on, handle_size:page and premap:off are
    added for the keys it does not name (TORCH_DEFAULTS).  native: False
    (the default until the native module is proven on a GPU) uses the
    pluggable allocator; None tries the native allocator (xseg/_native.py: built on
    first use, raises torch.OutOfMemoryError, torch's own stats) and falls
    back to the pluggable one, saying why on stderr; True requires it.
    XSEG_NATIVE=1 in the environment makes the default None.  patch_torch (pluggable only): make torch.cuda.memory_stats
    and the functions built on it (memory_allocated, max_memory_reserved, ...),
    reset_peak_memory_stats and memory_summary read xseg, since PyTorch's
    pluggable allocator does not support them.  Returns the native module or
    the torch.cuda.memory.CUDAPluggableAllocator in use;
    xseg._native.USED["mode"] says which ("native" or "pluggable")."""
    import sys  # noqa: PLC0415

    import os  # noqa: PLC0415

    from . import _native  # noqa: PLC0415
    if native is False and os.environ.get("XSEG_NATIVE") == "1":
        native = None
    with _lock:
        if _state["allocator"] is not None:
            return _again(conf)
        torch = import_torch()
        check_fresh(torch)
        text = _conf.format_conf(conf)
        check_backend(_conf.effective_text(text))
        _lib.load()
        apply_conf(text)
        if native is None or native:
            try:
                mod = _native.install(torch, _lib.path())
            except _native.NativeUnavailable as e:
                if native:
                    raise
                sys.stderr.write(f"xseg.install(): pluggable allocator ({e})\n")
                _native.USED.update(mode="pluggable", why=str(e))
            else:
                _state.update(allocator=mod, conf=text)
                _native.USED.update(mode="native", why="")
                sys.stderr.write(f"xseg.install(): native allocator (torch "
                                 f"{mod.built_torch_version()})\n")
                return mod
        else:
            _native.USED.update(mode="pluggable", why="native=False")
        alloc = _swap(torch)
        _state.update(allocator=alloc, conf=text)
        if not has_graph_hooks():
            _forbid_graphs(torch)
        if patch_torch:
            _patch(torch)
        return alloc


# What install() adds to the conf unless it names the key.  verbose: PyTorch
# cannot report a failed pluggable allocation (it gets a NULL pointer), so
# the library's message goes to stderr.  handle_size: a training or serving
# loop runs at its peak step after step; memory mapped with one handle per
# page moves between blocks without splitting a large handle, which costs
# a wait for the GPU and new handles (docs/pytorch.md).  premap: the
# reserve maps ahead in large handles whatever handle_size says, and holds
# up to 1/128 of the peak over live; on four model families it was slower
# and took more memory than premap:off (docs/pytorch.md, "premap on
# models").  release_slack is the core's default (0.006): measured on
# models too (docs/pytorch.md, "Twelfth session"), so PyTorch gets no value
# of its own.
TORCH_DEFAULTS = (("verbose", "on"), ("handle_size", "page"), ("premap", "off"))


def apply_conf(text):
    """Set the conf, with TORCH_DEFAULTS added for the keys it does not
    name.  Returns the conf set (None: none)."""
    full = _conf.effective_text(text)
    named = _conf.items(full)
    for key, value in TORCH_DEFAULTS:
        if key not in named:
            full = f"{full},{key}:{value}" if full else f"{key}:{value}"
    try:
        return _conf.set_conf(full)
    except XsegError:
        if text is not None:
            raise
        return None  # the allocator exists already, with XSEG_CONF: keep it


def _again(conf):
    text = _conf.format_conf(conf)
    if text is not None and text != _state["conf"]:
        raise XsegError(
            f"xseg.install(): already installed with conf {_state['conf']!r}; the conf "
            f"({text!r}) cannot change once PyTorch uses xseg")
    return _state["allocator"]


def _swap(torch):
    mem = torch.cuda.memory
    alloc = mem.CUDAPluggableAllocator(_lib.path(), "xseg_torch_alloc", "xseg_torch_free")
    _state["hooks"] = set_hooks(alloc.allocator())
    try:
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise XsegError(
            f"xseg.install(): PyTorch refused to switch allocators ({e}); call "
            "xseg.install() before anything touches CUDA memory.") from e
    return alloc


def installed():
    return _state["allocator"] is not None


def hooks():
    """The PyTorch hook setters that install() used."""
    return _state["hooks"]


def has_graph_hooks():
    return all(h in _state["hooks"] for h in GRAPH_HOOKS)


def _forbid_graphs(torch):
    """Without the pool hooks a captured graph could be handed memory that
    is reused after capture: refuse capture with a clear error instead."""
    graph_cls = getattr(torch.cuda, "CUDAGraph", None)
    if graph_cls is None:
        return

    def capture_begin(self, *args, **kwargs):
        raise XsegError(
            "xseg: CUDA graph capture needs PyTorch's set_begin_allocate_to_pool / "
            "set_end_allocate_to_pool_fn / set_release_pool hooks, which this PyTorch "
            "lacks; upgrade PyTorch or do not install xseg in processes that capture graphs")

    graph_cls.capture_begin = capture_begin


def _patch(torch):
    """Route torch.cuda's statistics functions to xseg."""
    def memory_stats(device=None):
        return _stats.memory_stats(device)

    def memory_stats_as_nested_dict(device=None):
        return _nest(_stats.memory_stats(device))

    def reset_peak_memory_stats(device=None):
        _stats.reset_peak_stats(device)

    def memory_summary(device=None, abbreviated=False):
        return _summary.summary(device)

    patches = {"memory_stats": memory_stats,
               "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
               "reset_peak_memory_stats": reset_peak_memory_stats,
               "reset_max_memory_allocated": reset_peak_memory_stats,
               "reset_max_memory_cached": reset_peak_memory_stats,
               "memory_summary": memory_summary}
    for module in (torch.cuda.memory, torch.cuda):
        for name, fn in patches.items():
            if hasattr(module, name):
                setattr(module, name, fn)
    _state["patched"] = True


def _nest(flat):
    out = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out
