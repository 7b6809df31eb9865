"""_stats_struct: ctypes mirror of struct xseg_stats (include/xseg.h).

Keep in the order of the field list, lib/stats_fields.h (which the C
header's struct is checked against at compile time):
tests/test_stats_list.py checks names, order, types and offsets against the
list.  The library fills at most `size` bytes and writes back how many it
filled, so a mismatch also shows as a returned size different from
ctypes.sizeof(XsegStats) (tests/test_struct.py checks it).
"""
import ctypes

u32, i32, u64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64

STATS_VERSION = 1

# enum xseg_op, in order; XSEG_OP_COUNT entries.
OPS = ("reserve", "address_free", "create", "release", "map", "unmap", "set_access",
       "mem_info", "event_create", "event_record", "event_query", "event_sync",
       "event_destroy", "stream_sync", "host_alloc", "host_free", "copy_to_host",
       "copy_to_device", "copy_wait", "export", "import")
OP_MAP = OPS.index("map")
OP_UNMAP = OPS.index("unmap")


class XsegCounter(ctypes.Structure):
    _fields_ = [("current", u64), ("peak", u64), ("total", u64)]


ARENA_COUNTERS = ("allocated_bytes", "requested_bytes", "active_blocks", "reserved_va_bytes",
                  "mapped_bytes", "cached_bytes", "segments", "handles")
# After the scalars: memory mapped outside the arena (docs/sharing.md).
SHARE_COUNTERS = ("dedicated_bytes", "imported_bytes")
COUNTERS = ARENA_COUNTERS + SHARE_COUNTERS

HEAD_SCALARS = ("driver_errors", "alloc_calls", "free_calls", "alloc_retries", "ooms",
                "syncs", "gc_runs", "trims", "released_bytes", "deferred_frees",
                "largest_free_block",
                "mapped_cap", "device_total", "page_size", "moved_bytes", "unmapping_bytes",
                "driver_calls_worker", "driver_ns_caller", "driver_ns_worker", "worker_jobs",
                "worker_bytes")
# After the share counters: the release budget (docs/config.md, expected_peak).
TAIL_SCALARS = ("release_budget", "slack_granted")
SCALARS = HEAD_SCALARS + TAIL_SCALARS  # every uint64_t field, in the struct's order


class XsegStats(ctypes.Structure):
    _fields_ = ([("size", u32), ("version", u32), ("device", i32), ("reserved0", u32)]
                + [(name, XsegCounter) for name in ARENA_COUNTERS]
                + [("driver_calls", u64 * len(OPS))]
                + [(name, u64) for name in HEAD_SCALARS]
                + [(name, XsegCounter) for name in SHARE_COUNTERS]
                + [(name, u64) for name in TAIL_SCALARS])


def new_stats():
    s = XsegStats()
    s.size = ctypes.sizeof(XsegStats)
    return s


class TorchPoolsInfo(ctypes.Structure):
    """struct xseg_torch_pools_info: the CUDA-graph pools of a device."""
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("pools", "in_use", "failed", "mapped_bytes", "live_blocks", "live_bytes")]
