"""_summary: a readable table of a device's xseg statistics, in the style
of torch.cuda.memory_summary()."""
from . import _stats
from ._stats_struct import OP_MAP, OP_UNMAP

WIDTH = 75  # inside the borders


def format_size(n):
    """Bytes in 10 columns: "  1.50 GiB" (a unit up from 1000 of the last)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1000 or unit == "TiB":
            return f"{n:6d} {unit:<3s}" if unit == "B" else f"{n:6.2f} {unit:<3s}"
        n /= 1024.0
    return str(n)


def format_count(n):
    for unit in ("", "K", "M", "G"):
        if abs(n) < 1000 or unit == "G":
            return f"{n:7d}   " if unit == "" else f"{n:7.2f} {unit:<2s}"
        n /= 1000.0
    return str(n)


def _line(text=""):
    return "|" + text.ljust(WIDTH)[:WIDTH] + "|"


def _rule(ch="-"):
    return "|" + ch * WIDTH + "|"


def _row(name, counter, fmt):
    cells = (counter.current, counter.peak, counter.total, counter.total - counter.current)
    return _line(f" {name:<22s}|" + "|".join(f" {fmt(v)} " for v in cells))


def _rows(s):
    return [
        _row("Allocated memory", s.allocated_bytes, format_size),
        _row("Requested memory", s.requested_bytes, format_size),
        _row("Reserved (mapped)", s.mapped_bytes, format_size),
        _row("Cached (mapped, free)", s.cached_bytes, format_size),
        _row("Active allocations", s.active_blocks, format_count),
        _row("Physical handles", s.handles, format_count),
        _row("Virtual reservations", s.segments, format_count),
        _row("Virtual range", s.reserved_va_bytes, format_size),
    ]


def _facts(s):
    cap = format_size(s.mapped_cap).strip() if s.mapped_cap else "none"
    return [
        _line(f" Alloc calls: {s.alloc_calls}   Free calls: {s.free_calls}"
              f"   Retries: {s.alloc_retries}   OOMs: {s.ooms}"),
        _line(f" Maps: {s.driver_calls[OP_MAP]}   Unmaps: {s.driver_calls[OP_UNMAP]}"
              f"   Event syncs: {s.syncs}   Trims: {s.trims}   GC runs: {s.gc_runs}"),
        _line(f" Deferred frees (record_stream): {s.deferred_frees}"
              f"   Driver errors: {s.driver_errors}"),
        _line(f" Largest free block: {format_size(s.largest_free_block).strip()}"
              f"   Released in total: {format_size(s.released_bytes).strip()}"),
        _line(f" Page size: {format_size(s.page_size).strip()}   Cap: {cap}"
              f"   Device memory: {format_size(s.device_total).strip()}"),
    ]


def summary(device=None):
    """The table as a string (like torch.cuda.memory_summary(device))."""
    s = _stats.raw_stats(device)
    title = f"xseg memory summary, device {s.device} ({_stats.backend(device)} backend)"
    head = _line(f" {'Metric':<22s}|" + "|".join(
        f" {h:^10s} " for h in ("Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")))
    lines = [_rule("="), _line(title.center(WIDTH)), _rule("="), head, _rule()]
    lines += _rows(s) + [_rule()] + _facts(s) + [_rule("=")]
    return "\n".join(lines) + "\n"
