#!/usr/bin/env python3
"""corpus_rounds.py: the replay corpus in interleaved rounds, one table.

Replays every trace through tools/gpu/bench (built by tools/gpu/build.sh),
one process per replay: each xseg conf (XSEG_BENCH_CONF) and, unless
--no-torch, PyTorch native (`bench --alloc torch`), every mode for a trace
before the next trace, ROUNDS rounds one after the other.  Appends one JSON
line per replay to OUT (bench's line plus "conf", "round", "tr"), then
prints a markdown table: per trace and mode the largest ratio over the
rounds and the replay seconds, median (min-max); then, per xseg conf, the
traces within 1.01, the traces at or under PyTorch native's median time,
and the geometric mean of the medians against the first conf.  The ratio
is report.py's one measure (report.honest): the larger of the
allocator's own peak of physical memory in the timed pass
(own_peak_bytes) and the cuMemGetInfo drop sampled in bench's second pass
(its "ratio" field), over peak live.  Up to 2026-12-07 this table showed
the sampled drop alone, which for xseg was the lower of the two (its second
pass started knowing the trace's peak, until xseg_trim restarted the
release budget in the twenty-fifth session).

usage: corpus_rounds.py run --bench BENCH --out OUT [--rounds N]
                            [--conf CONF ...] [--no-torch] [--budget S]
                            [--deadline S] TRACE...
       corpus_rounds.py table OUT
A conf may name `expected_peak:trace`: each replay then gets expected_peak
set to that trace's own peak of live bytes (docs/performance.md, "Knowing
the peak"), e.g. --conf backend:cuda,expected_peak:trace.
Processes on these machines vary 10-30%: take >= 5 rounds before a claim.
"""
import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_tools  # noqa: E402 (tools/gpu/corpus_tools.py: the trace reader)
import report  # noqa: E402 (tools/gpu/report.py: the one measure)

TORCH = "native"  # the conf name of the PyTorch native rows


def trace_name(path):
    base = os.path.basename(path)
    for ext in (".csv.gz", ".csv", ".gz"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


PEAK_WORD = "expected_peak:trace"  # in a conf: the trace's own peak of live bytes
_peaks = {}


def conf_for(mode, trace):
    """The conf a replay of trace gets: PEAK_WORD becomes expected_peak with
    the trace's peak of live bytes (docs/config.md, expected_peak: a program
    that states its peak), read from the trace once."""
    if PEAK_WORD not in mode:
        return mode
    if trace not in _peaks:
        _peaks[trace] = corpus_tools.trace_facts(corpus_tools.read_trace(trace))["peak_live_bytes"]
    return mode.replace(PEAK_WORD, "expected_peak:%d" % _peaks[trace])


def replay(bench, mode, trace, budget, timeout):
    """One replay in its own process: bench's JSON object, or one naming the error."""
    alloc = "torch" if mode == TORCH else "xseg"
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if alloc == "xseg":
        try:
            env["XSEG_BENCH_CONF"] = conf_for(mode, trace)
        except (OSError, ValueError) as e:
            return {"error": f"cannot read the peak of {trace}: {e}"}
    cmd = [bench, "--alloc", alloc, "--test", "replay", "--trace", trace, "--budget", str(budget)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}"}


def run(a):
    modes = ([] if a.no_torch else [TORCH]) + a.conf
    start = time.monotonic()
    with open(a.out, "a") as out:
        for r in range(1, a.rounds + 1):
            for trace in a.traces:
                for mode in modes:
                    if a.deadline and time.monotonic() - start > a.deadline:
                        print(f"corpus_rounds: deadline ({a.deadline} s) reached in round {r}",
                              file=sys.stderr)
                        return 0
                    row = {"conf": mode, "round": r, "tr": trace_name(trace)}
                    row.update(replay(a.bench, mode, trace, a.budget, a.budget + 60))
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            print(f"corpus_rounds: round {r} done ({time.monotonic() - start:.0f} s)",
                  file=sys.stderr)
    return 0


def ratio(r):
    """report.honest's ratio: own peak or sampled drop, the larger."""
    return report.honest(r)[1]


def table(path):
    """The markdown table and summary lines of OUT's rows."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    by = collections.defaultdict(list)
    modes, traces = [], []
    for r in rows:
        if r["conf"] not in modes:
            modes.append(r["conf"])
        if r["tr"] not in traces:
            traces.append(r["tr"])
        if "replay_s" in r and "peak_device_bytes" in r:
            by[(r["tr"], r["conf"])].append(r)
    lines = ["| trace | " + " | ".join("PyTorch native" if m == TORCH else f"xseg `{m}`"
                                      for m in modes) + " |",
             "|---" * (len(modes) + 1) + "|"]
    med = {}
    for t in sorted(traces):
        cells = []
        for m in modes:
            rs = by.get((t, m), [])
            if not rs:
                cells.append("-")
                continue
            ts = [r["replay_s"] for r in rs]
            med[(t, m)] = statistics.median(ts)
            cells.append(f"{max(ratio(r) for r in rs):.4f}, {med[(t, m)]:.3f} "
                         f"({min(ts):.3f}-{max(ts):.3f}) n={len(rs)}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    xs = [m for m in modes if m != TORCH]
    lines.append("")
    for m in xs:
        mine = [t for t in traces if (t, m) in med]
        within = sum(max(ratio(r) for r in by[(t, m)]) <= 1.01 for t in mine)
        fast = [t for t in mine if (t, TORCH) in med and med[(t, m)] <= med[(t, TORCH)]]
        both = [t for t in mine if (t, xs[0]) in med]
        gm = math.exp(sum(math.log(med[(t, m)] / med[(t, xs[0])]) for t in both) / len(both)) \
            if both else float("nan")
        lines.append(f"- `{m}`: ratio <= 1.01 on {within} of {len(mine)} traces; replay time "
                     f"<= PyTorch native's on {len(fast)} ({', '.join(sorted(fast)) or 'none'}); "
                     f"geometric mean of the medians against `{xs[0]}`: {gm:.3f}")
    failed = [r for r in rows if "error" in r]
    if failed:
        lines.append(f"- {len(failed)} replays failed, first: {failed[0]['tr']} "
                     f"`{failed[0]['conf']}`: {failed[0]['error']}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="replay the traces, append to OUT, print the table")
    r.add_argument("--bench", required=True, help="tools/gpu/bench, built by build.sh")
    r.add_argument("--out", required=True, help="JSON lines, appended to")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--conf", action="append", default=None,
                   help="an xseg conf (repeatable; default backend:cuda); in it, "
                        f"{PEAK_WORD} becomes expected_peak:<the trace's peak of live bytes>")
    r.add_argument("--no-torch", action="store_true", help="leave PyTorch native out")
    r.add_argument("--budget", type=int, default=30, help="bench's --budget per replay (s)")
    r.add_argument("--deadline", type=float, default=0,
                   help="start no replay after this many seconds (0: none)")
    r.add_argument("traces", nargs="+")
    t = sub.add_parser("table", help="print the table of OUT")
    t.add_argument("out")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        a.conf = a.conf or ["backend:cuda"]
        if a.rounds < 1:
            ap.error("--rounds must be at least 1")
        rc = run(a)
        print(table(a.out))
        return rc
    print(table(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
