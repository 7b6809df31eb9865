"""xseg: use the xseg expandable-segments GPU allocator from PyTorch.

Pure Python over libxseg.so (ctypes).  The public functions:

    install(conf=None)      switch PyTorch to xseg (before its first CUDA use)
    memory_stats(device)    torch.cuda.memory_stats()-style dict (+ "xseg.*")
    empty_cache()           give cached memory back to the driver
    trim(device, keep, wait)   the same for one device; wait=False returns at once
    set_expected_peak(nbytes, device)   the peak the release budget counts on
    summary(device)         readable table, like torch.cuda.memory_summary()
    stats_json(device)      the library's JSON statistics
    prometheus(device)      Prometheus text exposition, for a /metrics page
    graph_pools(device)     the CUDA-graph pools: count, memory, live blocks
    snapshot_json(device), history_json(device)   blocks and recorded events
    tag(name)               `with xseg.tag("weights"):` tags the thread's allocations
    sleep(tags, mode, device), wake_up(tags, device)   give memory back, keep addresses
    tag_stats(device)       per-tag live, mapped, sleeping and backup bytes
    cupy_allocator(stream)  xseg for cupy.cuda.set_allocator (docs/preload.md)
    reset_peak_stats(device), last_error(), library_path(), version()

See docs/pytorch.md in the xseg source tree.
"""
from ._conf import format_conf, set_conf
from ._lib import XsegError, last_error
from ._lib import path as library_path
from ._lib import version as library_version
from ._stats import (backend, empty_cache, graph_pools, history_json, memory_stats,
                     prometheus, raw_stats, reset_peak_stats, set_expected_peak, snapshot_json,
                     stats_dict, stats_json, trim)
from ._sleep import current_tag, sleep, tag, tag_stats, wake_up
from ._summary import summary
from .cupy import cupy_allocator
from . import share  # noqa: F401 (xseg.share: memory handed to other processes)
from ._torch import has_graph_hooks, hooks, install, installed

__version__ = "0.1.0"


def version():
    """Version of the loaded libxseg."""
    return library_version()


__all__ = [
    "XsegError", "backend", "cupy_allocator", "current_tag", "empty_cache", "format_conf",
    "graph_pools",
    "has_graph_hooks", "history_json", "hooks", "install", "installed", "last_error",
    "library_path", "memory_stats", "prometheus", "raw_stats", "reset_peak_stats", "set_conf",
    "set_expected_peak",
    "sleep", "snapshot_json", "stats_dict", "stats_json", "trim", "summary", "tag", "tag_stats",
    "version", "wake_up",
]
