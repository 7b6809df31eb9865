"""corpus_tools.py: the parts of the workload corpus (tools/traces/corpus/)
that need no torch: PyTorch allocator-history entries -> `xseg-trace v1`
lines (ids reused after free, streams numbered), peak live bytes of a
trace, deterministic gzip writing and reading, and the peers table
(peers.json -> Markdown).  Used by capture_corpus.py (on the GPU machine)
and corpus_table.py; unit-tested in tools/python/tests/test_corpus_tools.py.

History entries are what torch.cuda.memory._snapshot()["device_traces"][d]
holds: dicts with "action", "addr", "size", "stream".  In PyTorch 2.x
(c10/cuda/CUDACachingAllocator.cpp) an "alloc" entry carries orig_size,
the size the caller asked for (not rounded); "free_requested" is the
caller's free (block->requested_size), "free_completed" comes when the
block really returns to the cache (later when record_stream events are
pending).  A trace keeps the caller's view: alloc and free_requested; it
falls back on free_completed only when no free_requested entry exists.
"""
import gzip
import heapq
import io
import json
import os

ALLOC = "alloc"
FREE_REQUESTED = "free_requested"
FREE_COMPLETED = "free_completed"
HEADER = "# xseg-trace v1: a,<id>,<bytes>,<stream> | f,<id>"
GB = 1e9


class Conversion:
    """The result of convert(): the trace lines and what they hold."""

    def __init__(self):
        self.lines = []
        self.allocs = 0
        self.frees = 0
        self.peak_live = 0
        self.live = 0
        self.unknown_frees = 0   # frees of blocks allocated before recording
        self.double_allocs = 0   # an address handed out twice without a free
        self.zero_allocs = 0     # zero-byte allocations (left out)
        self.ignored = {}        # other actions (segment_*, snapshot, oom): counts
        self.streams = {0: 0}    # raw stream handle -> trace stream number
        self.max_ids = 0         # the most ids live at once
        self.free_action = FREE_REQUESTED

    @property
    def events(self):
        return len(self.lines)

    @property
    def live_at_end(self):
        return self.allocs - self.frees

    def summary(self):
        return {"events": self.events, "allocs": self.allocs, "frees": self.frees,
                "live_at_end": self.live_at_end, "peak_live_bytes": self.peak_live,
                "streams": len(set(self.streams.values())), "max_live_ids": self.max_ids,
                "unknown_frees": self.unknown_frees, "double_allocs": self.double_allocs,
                "zero_allocs": self.zero_allocs, "free_action": self.free_action,
                "ignored_actions": dict(sorted(self.ignored.items()))}


class _Ids:
    """Allocation ids: the smallest free one first, so ids stay dense."""

    def __init__(self):
        self.free = []
        self.next = 0

    def take(self):
        if self.free:
            return heapq.heappop(self.free)
        self.next += 1
        return self.next - 1

    def give(self, i):
        heapq.heappush(self.free, i)


def pick_free_action(entries):
    """free_requested when the history has any, else free_completed."""
    for e in entries:
        if e.get("action") == FREE_REQUESTED:
            return FREE_REQUESTED
    return FREE_COMPLETED


def _stream_of(conv, raw):
    raw = int(raw or 0)
    if raw not in conv.streams:
        conv.streams[raw] = len(conv.streams)
    return conv.streams[raw]


def _free(conv, ids, live, addr):
    held = live.pop(addr, None)
    if held is None:
        conv.unknown_frees += 1
        return
    ident, size = held
    conv.lines.append("f,%d" % ident)
    conv.frees += 1
    conv.live -= size
    ids.give(ident)


def _alloc(conv, ids, live, e):
    size, addr = int(e.get("size") or 0), e.get("addr")
    if size <= 0:
        conv.zero_allocs += 1
        return
    if addr in live:  # missed free: close the old one first
        conv.double_allocs += 1
        _free(conv, ids, live, addr)
    ident = ids.take()
    live[addr] = (ident, size)
    conv.lines.append("a,%d,%d,%d" % (ident, size, _stream_of(conv, e.get("stream"))))
    conv.allocs += 1
    conv.live += size
    conv.peak_live = max(conv.peak_live, conv.live)
    conv.max_ids = max(conv.max_ids, len(live))


def convert(entries, free_action=None):
    """History entries (in order) -> Conversion.  free_action: which
    action counts as the free (default: pick_free_action(entries))."""
    entries = list(entries)
    conv, ids, live = Conversion(), _Ids(), {}
    conv.free_action = free_action or pick_free_action(entries)
    for e in entries:
        action = e.get("action")
        if action == ALLOC:
            _alloc(conv, ids, live, e)
        elif action == conv.free_action:
            _free(conv, ids, live, e.get("addr"))
        elif action not in (FREE_REQUESTED, FREE_COMPLETED):
            conv.ignored[action] = conv.ignored.get(action, 0) + 1
    return conv


def parse_line(line):
    """One trace line -> ("a", id, bytes, stream), ("f", id) or None."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    f = line.split(",")
    if f[0] == "a" and len(f) == 4:
        return ("a", int(f[1]), int(f[2]), int(f[3]))
    if f[0] == "f" and len(f) == 2:
        return ("f", int(f[1]))
    raise ValueError("not an xseg-trace v1 line: %r" % line)


def trace_facts(lines):
    """Events, allocs, frees, live at end and peak live bytes of trace
    lines, checked: a free of a dead id or an alloc of a live id raises."""
    live, cur, peak, allocs, frees = {}, 0, 0, 0, 0
    for line in lines:
        ev = parse_line(line)
        if ev is None:
            continue
        if ev[0] == "a":
            if ev[1] in live:
                raise ValueError("id %d allocated while live" % ev[1])
            live[ev[1]] = ev[2]
            cur, allocs = cur + ev[2], allocs + 1
            peak = max(peak, cur)
        else:
            if ev[1] not in live:
                raise ValueError("free of id %d, which is not live" % ev[1])
            cur, frees = cur - live.pop(ev[1]), frees + 1
    return {"events": allocs + frees, "allocs": allocs, "frees": frees,
            "live_at_end": len(live), "peak_live_bytes": peak}


def write_trace(path, comments, lines):
    """gzip text, reproducible (no name, mtime 0): HEADER, '# ' comments,
    then the lines."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                           compresslevel=9) as gz:
            with io.TextIOWrapper(gz, encoding="ascii", newline="\n") as out:
                out.write(HEADER + "\n")
                for c in comments:
                    out.write("# " + c + "\n")
                for line in lines:
                    out.write(line + "\n")
    os.replace(tmp, path)


def read_trace(path):
    """The lines of a trace file (gzip or plain text)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="ascii") as f:
        return [line.rstrip("\n") for line in f]


# ------------------------------------------------------------ peers table

def ratio(reserved, live):
    return reserved / float(live) if reserved and live else None


def peer_cells(w, mode):
    m = w.get(mode) or {}
    reserved = m.get("peak_reserved_bytes")
    r = ratio(reserved, w.get("peak_live_bytes"))
    if m.get("error") or reserved is None:
        return "error" if m.get("error") else "n/a"
    return "%.2f GB, %.3f" % (reserved / GB, r) if r else "%.2f GB" % (reserved / GB)


def table_rows(peers):
    """One Markdown row per workload of a peers.json document."""
    rows = []
    for w in peers.get("workloads", []):
        if w.get("events") is None:  # not captured (yet): the error, or blanks
            cell = "error: %s" % str(w["error"])[:80].replace("|", "/") if w.get("error") \
                else "-"
            rows.append("| `%s` | %s | %s | - | - | - | - |" % (
                w.get("file", w.get("name")), w.get("description", ""), cell))
            continue
        secs = (w.get("native") or {}).get("seconds")
        rows.append("| `%s` | %s | %s | %.2f GB | %s | %s | %s |" % (
            w["file"], w.get("description", ""), "{:,}".format(w["events"]),
            w["peak_live_bytes"] / GB, peer_cells(w, "native"), peer_cells(w, "expandable"),
            "%.1f" % secs if secs is not None else "n/a"))
    return rows


TABLE_HEAD = ["| file | workload | events | peak live | PyTorch native: peak reserved, ratio | "
              "PyTorch expandable: peak reserved, ratio | seconds (native run) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]


def render_table(peers):
    """The corpus table (Markdown) from a peers.json document."""
    return "\n".join(TABLE_HEAD + table_rows(peers)) + "\n"


BEGIN, END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"


def replace_table(text, table):
    """text with what lies between the BEGIN and END markers replaced."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError("no %s ... %s markers" % (BEGIN, END))
    return text[:i + len(BEGIN)] + "\n" + table + text[j:]


def load_peers(path):
    with open(path) as f:
        return json.load(f)
