#!/usr/bin/env python3
"""churn_trace.py: cuda_churn's allocation sequence written as an xseg trace.

cuda_churn.cu (and `preload_app cudachurn`, its host stand-in) allocates
ITERS blocks of log-uniform sizes (256 B to 64 MiB, 4-byte multiples; seed
12345), each on one of two streams, a quarter through cudaMallocAsync, and
frees each one 24 iterations later.  This writes the same sequence as an
xseg-trace v1 file (`a,<id>,<bytes>,<stream>` / `f,<id>`, gzip when the
name ends in .gz), so that the allocator's placement on it can be studied
without the preload library: `xseg-replay` and `tools/ratio-floor` read it.

Streams in the trace: 0 for cudaMalloc (synchronous: the preload library
serves those on the legacy stream), 3 and 4 for cudaMallocAsync on the two
streams.  What the trace leaves out: the preload library's quarantine of
synchronous frees (docs/preload.md) and its pools; so its ratios are close
to, not the same as, those of `tools/preload/host_churn.py`, which runs the
real preload path on the host backend.

usage: churn_trace.py [--iters N] [--sync] OUT
       --iters N   iterations (default 8000, as gpu_proof.sh)
       --sync      every allocation through cudaMalloc (CHURN_SYNC=1)
Prints the peak of live bytes (the figure preload_app prints as live_peak).
Exit status: 0 success, 2 usage error.
"""
import argparse
import os
import sys

# The checked trace walk the corpus tools use (stdlib only).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu"))
from corpus_tools import HEADER, trace_facts, write_trace  # noqa: E402

DEPTH = 24            # a block is freed this many iterations after it is made
MASK = (1 << 64) - 1


class Rng:
    """The xorshift64 of cuda_churn.cu / preload_app.c."""

    def __init__(self, seed=12345):
        self.s = seed | 1

    def next(self):
        s = self.s
        s ^= (s << 13) & MASK
        s ^= s >> 7
        s ^= (s << 17) & MASK
        self.s = s
        return s


def sequence(iters, all_sync=False):
    """Yields trace lines; returns nothing.  Same draws, same order as C."""
    rng, ring, nid = Rng(), [None] * DEPTH, 0
    for i in range(iters + DEPTH):
        slot = i % DEPTH
        if ring[slot] is not None:
            yield "f,%d" % ring[slot][0]
            ring[slot] = None
        if i >= iters:
            continue
        shift = 8 + rng.next() % 19
        n = (1 << shift) + rng.next() % (1 << shift)
        n = (n + 3) // 4 * 4
        stream = rng.next() & 1
        is_async = (rng.next() % 4) == 0 and not all_sync
        yield "a,%d,%d,%d" % (nid, n, 3 + stream if is_async else 0)
        ring[slot] = (nid, n)
        nid += 1


def main():
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="churn_trace.py", description=doc[0],
                                 epilog="\n\n".join(doc[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=8000)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("out")
    a = ap.parse_args()
    if a.iters < 1:
        ap.error("--iters must be at least 1")
    lines = list(sequence(a.iters, a.sync))
    comment = "cuda_churn's sequence, %d iterations%s" % (a.iters,
                                                         ", all cudaMalloc" if a.sync else "")
    if a.out.endswith(".gz"):  # the corpus's reproducible gzip
        write_trace(a.out, [comment], lines)
    else:
        with open(a.out, "w") as f:
            f.write("\n".join([HEADER, "# " + comment] + lines) + "\n")
    print("live_peak=%d" % trace_facts(lines)["peak_live_bytes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
