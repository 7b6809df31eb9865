#!/usr/bin/env python3
"""peak_report.py: where a preloaded program's mapped peak went.

Reads the lines that XSEG_PRELOAD_PEAK_SNAPSHOT=FILE wrote (libxseg_preload:
the allocator's snapshot and stats when its mapped bytes were at their
highest, docs/preload.md "Where the peak goes") and splits the mapped bytes
over the application's live bytes at that moment into:
  quarantined   freed by the program, held until a device sync (still
                allocated in xseg);
  rounding      allocated by xseg beyond the requested bytes, quarantine
                aside (block and slot rounding);
  free, owned   mapped free space that belongs to a stream;
  free, neutral mapped free space any stream may take;
  other         the rest of xseg's cached bytes (pages on their way back:
                unmapping_bytes, the worker's in flight).
usage: peak_report.py FILE [FILE ...]   (one table row per line read)
"""
import json
import sys

MIB = float(1 << 20)


def split(line):
    """The row for one line of the file: a dict of MiB figures."""
    d = json.loads(line)
    snap, stats = d["snapshot"], d["stats"]
    mapped, live, quar = d["mapped"], d["app_live"], d["quarantined"]
    allocated = snap["allocated"]
    owned = neutral = 0
    largest = []
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "free" or not b["mapped"]:
                continue
            if b["stream"] is None:
                neutral += b["mapped"]
            else:
                owned += b["mapped"]
            largest.append(b["mapped"])
    cached = mapped - allocated
    largest.sort(reverse=True)
    return {
        "pid": d["pid"], "device": d["device"],
        "mapped": mapped / MIB, "live": live / MIB,
        "over": mapped / live if live else 0.0,
        "quarantined": quar / MIB,
        "rounding": (allocated - live - quar) / MIB,
        "owned": owned / MIB, "neutral": neutral / MIB,
        "other": (cached - owned - neutral) / MIB,
        "unmapping": stats.get("unmapping_bytes", 0) / MIB,
        "largest": ", ".join("%.1f" % (x / MIB) for x in largest[:6]),
        "missed": d.get("mapped_peak_at_exit", mapped) != mapped,
    }


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cols = ["pid", "mapped", "live", "over", "quarantined", "rounding", "owned", "neutral",
            "other", "unmapping", "largest"]
    print("| " + " | ".join(c if c != "over" else "mapped/live" for c in cols) +
          " |  (MiB; largest: the biggest mapped free blocks)")
    print("|" + "---|" * len(cols))
    for path in argv:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = split(line)
                cells = [("%.4f" % r[c]) if c == "over" else
                         ("%.1f" % r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols]
                print("| " + " | ".join(cells) + " |")
                if r["missed"]:
                    print("  (pid %d: the mapped peak at exit is above this snapshot's: a high "
                          "between two allocations was missed)" % r["pid"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
