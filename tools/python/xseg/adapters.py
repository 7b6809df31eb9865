"""adapters: xseg's tags, sleep and wake behind the interfaces that vLLM's
sleep mode and SGLang's memory saver call, so that those engines can use
xseg without knowing it.  Neither engine is needed to import or test them.

Which xseg tag holds what (docs/sleep.md):

    engine tag            xseg tag     memory                      sleeps as
    "weights"             "weights"    model weights               backup (vLLM level 1,
                                                                   SGLang enable_cpu_backup)
    "kv_cache"            "kv"         KV cache                    discard
    "cuda_graph" (SGLang) "cuda_graph" + "graphs"                  discard unless backed up
                          buffers allocated in the region, and the CUDA-graph pools
    "default"             "vllm" / "saver"  (never xseg's tag 0: that is all untagged memory)
    any other name        the same name

Both need PyTorch to use xseg as its allocator (xseg.install() at start-up,
before the first CUDA tensor): a tag is pushed on the allocating thread,
and xseg, not a separate memory pool, serves the allocation.  Unlike the
engines' own backends they keep every address without their own handle
bookkeeping, wait for queued GPU work with events (no device sync), back
up through one reused pinned buffer, and keep CUDA graphs replayable.
"""
import contextlib
import logging
import sys

from . import _lib, _sleep
from ._lib import XsegError

logger = logging.getLogger(__name__)

WEIGHTS, KV, GRAPHS = "weights", "kv", _sleep.GRAPHS


def _xseg_name(table, tag):
    return table.get(tag, tag)


def _graph_pools_on(graph_pools):
    """The "graphs" tag (CUDA-graph pools) is used when asked, or by default
    when xseg is PyTorch's allocator (only then does it exist)."""
    if graph_pools is not None:
        return bool(graph_pools)
    from . import _torch  # noqa: PLC0415
    return _torch.installed()


class VllmSleepAllocator:
    """vLLM's sleep-mode backend (vllm.device_allocator.cumem.CuMemAllocator)
    on xseg.

    Matched against vllm-project/vllm, vllm/device_allocator/cumem.py
    (CuMemAllocator: class attributes `instance` and `default_tag =
    "default"`, `get_instance()`, `use_memory_pool(tag=None)` (None ->
    default_tag), `sleep(offload_tags=None)` (None -> (default_tag,), a str
    -> a 1-tuple; those tags are offloaded to CPU, every other tag is
    discarded), `wake_up(tags=None)` (None -> all), `get_current_usage()`
    (bytes of the pool's allocations)) and its use in vllm/v1/worker/
    gpu_worker.py: weights under use_memory_pool(tag="weights"), the KV cache
    under tag="kv_cache"; sleep(level=1) calls
    sleep(offload_tags=("weights",)), level 2 sleep(offload_tags=()); wake_up
    is called with ["weights"] / ["kv_cache"] or None.

    Tags (engine -> xseg): "weights" -> "weights" (backed up at level 1),
    "kv_cache" -> "kv" (discarded), "default" -> "vllm".  With graph_pools
    (default: when xseg is PyTorch's allocator) the CUDA-graph pools, tag
    "graphs", sleep too: backed up if "graphs" is in offload_tags, else
    discarded; vLLM's own backend leaves graph memory mapped.  They wake
    with "kv_cache" (runtime memory, needed before the next generate), so
    vLLM's wake_up(["weights"]) then wake_up(["kv_cache"]) wakes them.

    Differences: wake_up skips tags that are not asleep (vLLM's backend
    would try to map them twice); offload tags never used are ignored, as
    in vLLM.  To use it, make vLLM's worker find it, e.g.
    `vllm.device_allocator.cumem.CuMemAllocator = VllmSleepAllocator`
    before the engine starts, with xseg.install() first in the worker."""

    instance = None
    default_tag = "default"
    TAGS = {"weights": WEIGHTS, "kv_cache": KV, "default": "vllm"}
    GRAPHS_WITH = "kv_cache"  # wake_up(["kv_cache"]) wakes the graph pools too

    @staticmethod
    def get_instance():
        """The one instance (vLLM calls this, never the constructor)."""
        if VllmSleepAllocator.instance is None:
            VllmSleepAllocator.instance = VllmSleepAllocator()
        return VllmSleepAllocator.instance

    def __init__(self, device=None, graph_pools=None):
        self.device = device
        self.graph_pools = graph_pools
        self.used = []       # engine tags seen by use_memory_pool, in order
        self.asleep = set()  # xseg tags this adapter put to sleep

    def xseg_tag(self, tag):
        """The xseg tag that holds the engine tag's memory."""
        return _xseg_name(self.TAGS, self.default_tag if tag is None else tag)

    @contextlib.contextmanager
    def use_memory_pool(self, tag=None):
        """Allocations of this thread inside belong to `tag` (None: default_tag)."""
        tag = self.default_tag if tag is None else tag
        if not isinstance(tag, str):
            raise TypeError(f"use_memory_pool: tag must be a str, not {tag!r}")
        with _sleep.tag(self.xseg_tag(tag)):
            if tag not in self.used:
                self.used.append(tag)
            yield

    def sleep_plan(self, offload_tags=None):
        """{xseg tag: "backup" | "discard"} that sleep(offload_tags) uses."""
        if offload_tags is None:
            offload_tags = (self.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        offload = set(offload_tags)
        out = {self.xseg_tag(t): "backup" if t in offload else "discard" for t in self.used}
        if _graph_pools_on(self.graph_pools):
            out[GRAPHS] = "backup" if GRAPHS in offload else "discard"
        return {t: m for t, m in out.items() if t not in self.asleep}

    def sleep(self, offload_tags=None):
        """Offload (backup) the memory of offload_tags, discard every other
        tag's; addresses are kept.  Logs the bytes given back."""
        modes = self.sleep_plan(offload_tags)
        if not modes:
            return
        done = _sleep.sleep(tuple(modes), mode=modes, device=self.device)
        self.asleep.update(done)
        stats = _sleep.tag_stats(self.device)
        total = sum(stats[t]["sleeping_bytes"] for t in done if t in stats)
        backup = sum(stats[t]["backup_bytes"] for t in done if t in stats)
        logger.info("xseg VllmSleepAllocator: sleep gave back %.2f GiB, %.2f GiB of it "
                    "backed up in CPU memory", total / 2**30, backup / 2**30)

    def wake_up(self, tags=None):
        """Map the memory of `tags` (None: all) again, backups restored."""
        if tags is None:
            names = sorted(self.asleep)
        else:
            tags = [tags] if isinstance(tags, str) else list(tags)
            if self.GRAPHS_WITH in tags:
                tags.append(GRAPHS)
            names = {self.xseg_tag(t) for t in tags}
            names = sorted(n for n in names if n in self.asleep)
        if not names:
            return
        _sleep.wake_up(names, device=self.device)
        self.asleep.difference_update(names)

    def get_current_usage(self):
        """Bytes allocated under the adapter's tags (asleep ones included)."""
        stats = _sleep.tag_stats(self.device)
        names = {self.xseg_tag(t) for t in self.used}
        return sum(s["live_bytes"] for n, s in stats.items() if n in names)


class TorchMemorySaverAdapter:
    """SGLang's memory saver (sglang/srt/torch_memory_saver_adapter.py's
    TorchMemorySaverAdapter over fzyzcjy/torch_memory_saver) on xseg.

    Matched against torch_memory_saver/entrypoint.py (TorchMemorySaver:
    `region(tag="default", enable_cpu_backup=False)` context manager,
    `cuda_graph(cuda_graph, pool=None, stream=None,
    capture_error_mode="global", tag="default", enable_cpu_backup=False)`,
    `disable()`, `pause(tag=None)` and `resume(tag=None)` (None: every tag),
    the `enabled` property) and SGLang's adapter (`create(enable)`,
    `check_validity(caller_name)`, `configure_subprocess()`).  SGLang's tags
    (sglang.srt.constants): GPU_MEMORY_TYPE_WEIGHTS = "weights",
    GPU_MEMORY_TYPE_KV_CACHE = "kv_cache", GPU_MEMORY_TYPE_CUDA_GRAPH =
    "cuda_graph".

    Tags (engine -> xseg): "weights" -> "weights", "kv_cache" -> "kv",
    "cuda_graph" -> "cuda_graph" (what the region allocates outside a
    capture) plus "graphs" (the CUDA-graph pools, when graph_pools is on:
    by default when xseg is PyTorch's allocator), "default" -> "saver".
    A tag sleeps in backup mode if any region of it asked for
    enable_cpu_backup (torch_memory_saver decides per allocation; xseg per
    tag, so it keeps more, never less), in discard mode otherwise."""

    TAGS = {"weights": WEIGHTS, "kv_cache": KV, "default": "saver"}
    GRAPH_TAG = "cuda_graph"

    @staticmethod
    def create(enable=True, device=None, graph_pools=None):
        """SGLang's factory: an adapter, doing nothing when not enabled."""
        return TorchMemorySaverAdapter(enable, device, graph_pools)

    def __init__(self, enable=True, device=None, graph_pools=None):
        self._enable = bool(enable)
        self.device = device
        self.graph_pools = graph_pools
        self.backup = {}     # engine tag -> enable_cpu_backup of any region
        self.asleep = set()  # engine tags paused

    @property
    def enabled(self):
        """True when switched on and libxseg loads."""
        if not self._enable:
            return False
        try:
            _lib.load()
        except XsegError:
            return False
        return True

    def check_validity(self, caller_name):
        if not self.enabled:
            logger.warning("`%s` will not save memory: the xseg memory saver is not enabled "
                           "(switched off, or libxseg does not load)", caller_name)
        elif "torch" in sys.modules and not _graph_pools_on(None):
            logger.warning("`%s` will not save memory: PyTorch does not use xseg "
                           "(call xseg.install() before the first CUDA tensor)", caller_name)

    @contextlib.contextmanager
    def configure_subprocess(self):
        """Nothing to set up (no LD_PRELOAD): the subprocess calls xseg.install()."""
        yield

    def xseg_tags(self, tag):
        """The xseg tags holding the engine tag's memory (the region's first)."""
        names = [_xseg_name(self.TAGS, tag)]
        if tag == self.GRAPH_TAG and _graph_pools_on(self.graph_pools):
            names.append(GRAPHS)
        return names

    @contextlib.contextmanager
    def region(self, tag="default", enable_cpu_backup=False):
        """Allocations of this thread inside belong to `tag`; its memory is
        backed up on pause when enable_cpu_backup, discarded otherwise."""
        if not self._enable:
            yield
            return
        self.backup[tag] = self.backup.get(tag, False) or bool(enable_cpu_backup)
        with _sleep.tag(self.xseg_tags(tag)[0]):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph=None, pool=None, stream=None, capture_error_mode="global",
                   tag=GRAPH_TAG, enable_cpu_backup=False, **kwargs):
        """torch.cuda.graph(...) inside region(tag): the captured memory is
        in xseg's graph pools, which pause(tag) puts to sleep."""
        import torch  # noqa: PLC0415 (only this method needs it)
        with self.region(tag, enable_cpu_backup), torch.cuda.graph(
                cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode,
                **kwargs):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Allocations inside are untagged (never paused)."""
        with _sleep.tag("default"):
            yield

    def pause_plan(self, tag=None):
        """{xseg tag: "backup" | "discard"} that pause(tag) uses."""
        tags = [t for t in self.backup if t not in self.asleep] if tag is None else [tag]
        out = {}
        for t in tags:
            for name in self.xseg_tags(t):
                out[name] = "backup" if self.backup.get(t) else "discard"
        return out

    def pause(self, tag=None):
        """Give back the memory of `tag` (None: every awake tag) keeping its
        addresses.  A tag paused already raises XsegError (XSEG_ERR_STATE)."""
        if not self._enable:
            return
        tags = [t for t in self.backup if t not in self.asleep] if tag is None else [tag]
        modes = self.pause_plan(tag)
        if modes:
            _sleep.sleep(tuple(modes), mode=modes, device=self.device)
        self.asleep.update(tags)

    def resume(self, tag=None):
        """Map the memory of `tag` (None: every paused tag) again.  A tag
        not paused raises XsegError (XSEG_ERR_STATE)."""
        if not self._enable:
            return
        tags = sorted(self.asleep) if tag is None else [tag]
        names = [n for t in tags for n in self.xseg_tags(t)]
        if names:
            _sleep.wake_up(names, device=self.device)
        self.asleep.difference_update(tags)
