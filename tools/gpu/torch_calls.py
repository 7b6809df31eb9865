#!/usr/bin/env python3
"""torch_calls.py: what one PyTorch tensor allocation costs the CPU under
each allocator, when every block comes from the cache (issue 13: is any of
the model benchmark's gap the allocator's own path, not its driver calls?).

The models of bench_models.py are bound by the CPU (the GPU is busy 14-54%
of the time), so a slower allocation path would slow them; but their
throughput varies 10-60% between processes, far more than such a path
could cost. This measures the path alone, where the noise is small:

  - pairs_SIZE: torch.empty(SIZE) then its release, in a loop (the block
    comes straight back from the cache), ns per pair;
  - ring: 64 live tensors of log-uniform sizes, 512 B to 32 MiB (a fixed
    sequence), each step releasing the oldest and allocating the next, ns
    per step, after one untimed pass over the sequence (the cache warm);
  - ring_streams: the same with the allocations alternating between two
    streams (PyTorch keeps blocks per stream; xseg records the stream).

No kernel runs (deterministic fill off), so the time is Python, PyTorch's
dispatcher and tensor bookkeeping, and the allocator: the first two are the
same in every mode, so the differences between modes are the allocators'.
Each figure is the median of BATCHES batches in its process.

One subprocess per (mode, round), the modes in rotating order (bench_report
.schedule). The summary gives, per figure and mode, the median (min-max)
over rounds, and xseg's time over the faster PyTorch mode of the same
round: median and a distribution-free interval (bench_report.median_interval);
its last row, each process's peak of reserved memory (MB, over every figure
it measured), xseg's over the smaller PyTorch mode's.

    PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
        python3 tools/gpu/torch_calls.py --rounds 5 --out OUT \\
        --modes native expandable xseg xseg-native [--variant CONF ...]

Writes OUT/calls.jsonl (one line per process) and OUT/calls.md. Needs torch
and a GPU; nothing is downloaded.

    python3 tools/gpu/torch_calls.py --trace ring.csv.gz [--passes 4]

writes the ring's sequence as an xseg trace instead (no torch), for
xseg-replay on the host backend (docs/benchmarks.md, twenty-sixth session).
"""
import argparse
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import bench_models  # noqa: E402  (tools/python; imports no torch)
import bench_report  # noqa: E402

MODES = ("native", "expandable", "xseg", "xseg-native")
PEERS = ("native", "expandable")
PAIR_SIZES = (512, 65536, 1 << 20, 16 << 20)
RING_LIVE = 64
RING_STEPS = 4096


# ------------------------------------------------------------- child side

def ring_sizes(seed, n, low=512, high=32 << 20):
    """n log-uniform sizes in [low, high], the same for a given seed."""
    rng = random.Random(seed)
    lo, hi = math.log(low), math.log(high)
    return [int(math.exp(rng.uniform(lo, hi))) for _ in range(n)]


def ring_trace(out, seed, passes):
    """Write the ring's allocation sequence (passes over the sizes, one
    stream, as ring() runs it) to the file object out as an xseg trace, for
    xseg-replay on the host backend; returns the events written."""
    sizes = ring_sizes(seed, RING_STEPS)
    live = [None] * RING_LIVE
    out.write(f"# xseg-trace v1: torch_calls.py ring, seed {seed}, {passes} passes\n")
    events = 0
    for i in range(RING_STEPS * passes):
        slot = i % RING_LIVE
        if live[slot] is not None:
            out.write(f"f,{live[slot]}\n")
            events += 1
        live[slot] = i + 1
        out.write(f"a,{i + 1},{sizes[i % RING_STEPS]},0\n")
        events += 1
    return events


def batches_ns(step, per_batch, batches, sync):
    """Median and minimum ns per step() over batches of per_batch steps."""
    out = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(per_batch):
            step()
        sync()
        out.append((time.perf_counter_ns() - t0) / per_batch)
    return statistics.median(out), min(out)


def pairs(torch, size, per_batch, batches):
    def step():
        torch.empty(size, dtype=torch.uint8, device="cuda")
    for _ in range(200):
        step()
    return batches_ns(step, per_batch, batches, torch.cuda.synchronize)


def ring(torch, sizes, batches, streams):
    """A ring of RING_LIVE tensors over sizes, one replaced per step."""
    live = [None] * RING_LIVE
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] = (i + 1) % len(sizes)
        slot = i % RING_LIVE
        live[slot] = None
        if streams:
            with torch.cuda.stream(streams[i & 1]):
                live[slot] = torch.empty(sizes[i], dtype=torch.uint8, device="cuda")
        else:
            live[slot] = torch.empty(sizes[i], dtype=torch.uint8, device="cuda")
    for _ in range(len(sizes)):  # warm: every size of the sequence seen once
        step()
    return batches_ns(step, len(sizes) // 4, batches, torch.cuda.synchronize)


def setup(mode, conf):
    """bench_models' allocator switch, then no deterministic fill: torch.empty
    launches no kernel."""
    torch, _, info = bench_models.setup_mode(mode, conf)
    torch.use_deterministic_algorithms(False)
    return torch, info


def child(args):
    torch, info = setup(*bench_models.split_mode(args.mode, args.xseg_conf))
    res = {"mode": args.mode, "round": args.round, "info": info}
    want = set(args.figures)
    for size in PAIR_SIZES:
        if f"pairs_{size}" in want:
            med, low = pairs(torch, size, args.per_batch, args.batches)
            res[f"pairs_{size}"], res[f"pairs_{size}_min"] = med, low
    sizes = ring_sizes(args.seed, RING_STEPS)
    if "ring" in want:
        res["ring"], res["ring_min"] = ring(torch, sizes, args.batches, None)
    if "ring_streams" in want:
        two = [torch.cuda.Stream(), torch.cuda.Stream()]
        res["ring_streams"], res["ring_streams_min"] = ring(torch, sizes, args.batches, two)
    res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    if bench_report.is_xseg(args.mode):
        import xseg
        st = xseg.memory_stats()
        res["xseg_counters"] = {k: st[k] for k in st if k.startswith("xseg.") and (
            "driver" in k or "slack" in k or
            k in ("xseg.syncs", "xseg.alloc_calls", "xseg.free_calls"))}
    with open(args.json, "a") as f:
        f.write(json.dumps(res) + "\n")
    return 0


# ------------------------------------------------------------ parent side

FIGURES = tuple(f"pairs_{s}" for s in PAIR_SIZES) + ("ring", "ring_streams")


# The process's peak of reserved memory (torch.cuda.max_memory_reserved:
# PyTorch's segments, xseg's mapped bytes) over every figure it measured, MB.
MEMORY = "peak_reserved_mb"


def by_round(runs):
    """{figure: {round: {mode: value}}} from the children's lines: ns for
    the FIGURES, MB for MEMORY."""
    out = {}
    for r in runs:
        vals = {fig: r[fig] for fig in FIGURES if fig in r}
        if "peak_reserved_bytes" in r:
            vals[MEMORY] = r["peak_reserved_bytes"] / 1e6
        for fig, v in vals.items():
            out.setdefault(fig, {}).setdefault(r["round"], {})[r["mode"]] = v
    return out


def paired_ratios(rounds, mode):
    """mode's value over the smaller PyTorch mode's (the faster, or the one
    with less memory), per round that has both."""
    out = []
    for modes in rounds.values():
        peers = [modes[p] for p in PEERS if p in modes]
        if mode in modes and peers:
            out.append(modes[mode] / min(peers))
    return out


def spread(values):
    s = bench_report.summarize(values)
    return f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})"


def table(runs, modes):
    """Markdown: per figure, each mode's ns (median (min-max) over rounds),
    then each xseg mode's paired ratio to the round's faster peer; last,
    the processes' peak reserved MB, paired with the smaller peer."""
    data = by_round(runs)
    xmodes = [m for m in modes if bench_report.is_xseg(m)]  # variants too: xseg[CONF]
    head = ["figure"] + [f"{m} ns" for m in modes] + [f"{m} / faster peer" for m in xmodes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fig in FIGURES + (MEMORY,):
        rounds = data.get(fig, {})
        if fig == MEMORY and not rounds:
            continue
        cells = [fig]
        for m in modes:
            vals = [v[m] for v in rounds.values() if m in v]
            cells.append(spread(vals) if vals else "-")
        for m in xmodes:
            ratios = paired_ratios(rounds, m)
            if not ratios:
                cells.append("-")
                continue
            lo, hi, cov = bench_report.median_interval(ratios)
            cells.append(f"{statistics.median(ratios):.3f} ({lo:.3f}-{hi:.3f}, "
                         f"{100 * cov:.1f}%, n={len(ratios)})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def all_modes(args):
    """The modes, then one xseg mode per --variant (xseg[CONF])."""
    return list(args.modes) + [bench_models.variant_name(c) for c in args.variant]


def parent(args):
    os.makedirs(args.out, exist_ok=True)
    jsonl = os.path.join(args.out, "calls.jsonl")
    open(jsonl, "w").close()
    failed = 0
    modes = all_modes(args)
    for rnd, jobs in enumerate(bench_report.schedule(["calls"], modes, args.rounds, True)):
        for mode, _ in jobs:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--mode", mode,
                   "--figures", *args.figures,
                   "--round", str(rnd), "--json", jsonl, "--batches", str(args.batches),
                   "--per-batch", str(args.per_batch), "--seed", str(args.seed)]
            if args.xseg_conf is not None:
                cmd += ["--xseg-conf", args.xseg_conf]
            try:
                env = bench_models.mode_env(bench_models.split_mode(mode, None)[0])
                p = subprocess.run(cmd, env=env, timeout=args.timeout,
                                   capture_output=True, text=True)
                rc, tail = p.returncode, (p.stderr or "")[-600:]
            except subprocess.TimeoutExpired:
                rc, tail = "timeout", ""
            print(f"round {rnd + 1} {mode}: rc={rc}", flush=True)
            if rc != 0:
                failed += 1
                print(tail, file=sys.stderr)
    with open(jsonl) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    md = table(runs, modes)
    with open(os.path.join(args.out, "calls.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 1 if failed else 0


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Figures: " + ", ".join(FIGURES))
    ap.add_argument("--out", help="folder for calls.jsonl and calls.md (parent)")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--figures", nargs="+", default=list(FIGURES), choices=FIGURES,
                    help="what each process measures (default: all)")
    ap.add_argument("--batches", type=int, default=15, help="timed batches per figure")
    ap.add_argument("--per-batch", type=int, default=2000, help="pairs per batch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--xseg-conf", default=None, help="conf for the xseg modes "
                    "(default: xseg.install()'s)")
    ap.add_argument("--variant", action="append", default=[], metavar="CONF",
                    help="one more mode: xseg with this conf (as xseg[CONF]; repeatable)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per process")
    ap.add_argument("--trace", help="write the ring's sequence as a gzipped xseg trace to "
                    "this file and exit (no torch needed; replay it with xseg-replay)")
    ap.add_argument("--passes", type=int, default=4, help="passes over the ring's sizes "
                    "in --trace's file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.child and not args.out and not args.trace:
        ap.error("--out (or --trace) is required")
    return args


def main(argv=None):
    args = parse(argv)
    if args.trace:
        with gzip.open(args.trace, "wt") as f:
            ring_trace(f, args.seed, args.passes)
        return 0
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
