#!/usr/bin/env python3
"""bench_report.py: the pure-Python side of bench_models.py (no torch, stdlib
only, unit-tested in tests/test_bench.py): the interleaved order of the runs,
the median and spread of each (workload, mode) over its rounds, the verdicts
of issue 13's model figure and the text and Markdown tables.

The figure (issue 13, "Real models"): on each workload, xseg's median
throughput >= max(native median, expandable median) * (1 - FIGURE_SLACK), and
xseg's median peak device memory <= expandable's; over >= FIGURE_MIN_FAMILIES
model families with >= FIGURE_MIN_ROUNDS rounds each.

Run by itself it prints the tables of a results JSON written by
bench_models.py:  python3 tools/python/bench_report.py results.json
"""
import argparse
import json
import math
import statistics
import sys

MODES = ("native", "expandable", "xseg")
PEERS = ("native", "expandable")
# Every workload bench_models.py knows, in table order; FAMILIES are the real
# model families the figure counts (graph checks CUDA graphs, probe measures).
WORKLOADS = ("llama", "gpt2", "moe", "bert", "vit", "graph", "probe")
FAMILIES = ("llama", "gpt2", "moe", "bert", "vit")
FIGURE_SLACK = 0.01
FIGURE_MIN_FAMILIES = 4
FIGURE_MIN_ROUNDS = 5
PAIRED_CONFIDENCE = 0.95
GiB = float(1 << 30)
# Per-run records too large for the aggregated rows (the JSON's "runs" keeps them).
BULKY = ("call_times", "throughput_all", "losses", "traceback", "stderr_tail")
OUTPUT_WORD = {True: "identical", False: "DIFFER", None: "not compared"}


# ------------------------------------------------------------------ order

def rotated(seq, k):
    """seq started at its item k (mod its length)."""
    seq = list(seq)
    if not seq:
        return seq
    k %= len(seq)
    return seq[k:] + seq[:k]


def schedule(workloads, modes, rounds, together):
    """The runs, round by round: a list of rounds, each a list of
    (mode, [workloads]) jobs, one subprocess per job.  Round r starts the
    mode order at mode r, so no mode always runs first (drift over the run
    hits every mode alike).  together: one subprocess per (mode, round) runs
    all the workloads, their order also rotated by r and the same for every
    mode of the round; else one subprocess per (workload, mode, round)."""
    plan = []
    for r in range(rounds):
        ms = rotated(modes, r)
        if together:
            plan.append([(m, rotated(workloads, r)) for m in ms])
        else:
            plan.append([(m, [w]) for w in workloads for m in ms])
    return plan


def round_fits(left_s, done_round_s):
    """Whether another round fits in left_s seconds, judged by the longest
    round done after the first (which pays the one-off costs: bytecode
    compiled, libraries loaded), or by the first alone; the first round
    always runs."""
    if not done_round_s:
        return True
    return left_s >= max(done_round_s[1:] or done_round_s)


# ------------------------------------------------------------- statistics

def summarize(values):
    """median, min, max and relative spread ((max - min) / median) of a
    non-empty list of numbers."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {"median": med, "min": lo, "max": hi,
            "spread": (hi - lo) / med if med else None}


def aggregate(runs):
    """One row from the rounds of a (workload, mode): the first successful
    run's fields, then medians (throughput, peaks) with min, max and relative
    spread, the per-round values, the rounds counted and failed, and every
    round's output hash."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        row = {k: v for k, v in runs[-1].items() if k not in BULKY}
        row.update(rounds=0, rounds_failed=len(runs))
        return row
    row = {k: v for k, v in ok[0].items() if k not in BULKY}
    thr = summarize([r["throughput"] for r in ok])
    peak = summarize([r["peak_device_bytes"] for r in ok])
    row.update(throughput=thr["median"], throughput_min=thr["min"], throughput_max=thr["max"],
               throughput_spread=thr["spread"], throughput_rounds=[r["throughput"] for r in ok],
               peak_device_bytes=peak["median"], peak_device_min=peak["min"],
               peak_device_max=peak["max"],
               peak_device_rounds=[r["peak_device_bytes"] for r in ok],
               rounds=len(ok), rounds_failed=len(runs) - len(ok),
               output_hashes=[r.get("output_hash") for r in ok])
    for key in ("peak_reserved_bytes", "peak_allocated_bytes", "peak_drop_polled_bytes"):
        if all(key in r for r in ok):
            row[key] = statistics.median(r[key] for r in ok)
    if len(set(row["output_hashes"])) > 1:
        row["output_hash"] = "differs between rounds"
    if len(ok) < len(runs):
        row["round_errors"] = [r["error"] for r in runs if "error" in r]
    return row


# ---------------------------------------------------------------- verdicts

def is_xseg(mode):
    return mode in ("xseg", "xseg-native") or mode.startswith("xseg[")


def outputs_verdict(rows, complete):
    """(identical?, note) from each mode's output hashes over its rounds:
    True when every mode always gave one same hash; False when the modes
    differ, or when an xseg mode varies between its rounds while PyTorch's
    modes do not (the workload is deterministic, xseg is not); None when a
    PyTorch mode varies too (the workload itself is not deterministic) or
    modes are missing."""
    seen = {m: set(r.get("output_hashes") or [r.get("output_hash")]) for m, r in rows.items()}
    varying = sorted(m for m, h in seen.items() if len(h) > 1)
    if any(not is_xseg(m) for m in varying):
        return None, "nondeterministic workload: " + ", ".join(varying) + " vary between rounds"
    if varying:
        return False, ", ".join(varying) + " vary between rounds, PyTorch's modes do not"
    if len({next(iter(h)) for h in seen.values()}) > 1:
        return False, "modes differ"
    return (True, "") if complete else (None, "modes missing")


def within_slack(ratio):
    """ratio (xseg over the faster peer) meets the figure's throughput: at
    most FIGURE_SLACK under (exactly 1% under counts as met)."""
    return ratio >= 1.0 - FIGURE_SLACK - 1e-12


def figure_for(row, rows):
    """The issue's figure for one xseg mode against the PyTorch modes of the
    same workload (both needed): throughput and memory, each with its
    numbers."""
    if not all(p in rows for p in PEERS):
        return {"met": None, "missing": [p for p in PEERS if p not in rows]}
    best = max(PEERS, key=lambda p: rows[p]["throughput"])
    vs_best = row["throughput"] / rows[best]["throughput"]
    exp_peak = rows["expandable"]["peak_device_bytes"]
    thr_ok = within_slack(vs_best)
    mem_ok = row["peak_device_bytes"] <= exp_peak
    return {"met": thr_ok and mem_ok, "throughput_ok": thr_ok, "memory_ok": mem_ok,
            "best_peer": best, "throughput_vs_best_peer": vs_best,
            "peak_vs_expandable": row["peak_device_bytes"] / exp_peak if exp_peak else None,
            "rounds": row.get("rounds", 1)}


def compare(results):
    """Per workload: outputs across modes and rounds, the issue's figure for
    xseg and each variant, and the older per-workload checks."""
    verdict = {}
    for w in workload_order(results):
        rows = {m: r for (wl, m), r in results.items() if wl == w and "error" not in r}
        if not rows:
            continue
        complete = all(m in rows for m in MODES)
        same, note = outputs_verdict(rows, complete)
        v = {"outputs_identical": same, "outputs_note": note,
             "hashes": {m: r.get("output_hash") for m, r in rows.items()}}
        if w == "probe":  # measurements only: no outputs, no figure
            v.update(outputs_identical=None, outputs_note="probe: measurements only")
        if w == "graph":
            v["graph_ok"] = {m: r.get("graph_ok") for m, r in rows.items()}
        if "xseg" in rows and "expandable" in rows:
            v["xseg_peak_below_expandable"] = (rows["xseg"]["peak_device_bytes"]
                                               < rows["expandable"]["peak_device_bytes"])
        if "xseg" in rows and "native" in rows:
            ratio = rows["xseg"]["throughput"] / rows["native"]["throughput"]
            v["xseg_throughput_vs_native"] = ratio
            v["xseg_throughput_within_2pct"] = ratio >= 0.98
        if w != "probe":
            v["figure"] = {m: figure_for(r, rows) for m, r in rows.items() if is_xseg(m)}
        variants = variant_checks(rows)
        if variants:
            v["variants"] = variants
        verdict[w] = v
    return verdict


def variant_checks(rows):
    out = {}
    for m, r in rows.items():
        if m in MODES:
            continue
        out[m] = {}
        if "expandable" in rows:
            out[m]["peak_below_expandable"] = (r["peak_device_bytes"]
                                               < rows["expandable"]["peak_device_bytes"])
        if "native" in rows:
            out[m]["throughput_vs_native"] = r["throughput"] / rows["native"]["throughput"]
    return out


def overall(verdict, mode="xseg"):
    """The figure over the run for one xseg mode: met when every model
    family measured met it, with >= FIGURE_MIN_FAMILIES families and
    >= FIGURE_MIN_ROUNDS rounds on each (fewer: met is None, not proven)."""
    per = {w: v["figure"][mode] for w, v in verdict.items()
           if w in FAMILIES and mode in v.get("figure", {})}
    measured = {w: f for w, f in per.items() if f["met"] is not None}
    rounds = min((f["rounds"] for f in measured.values()), default=0)
    failed = sorted(w for w, f in measured.items() if not f["met"])
    enough = len(measured) >= FIGURE_MIN_FAMILIES and rounds >= FIGURE_MIN_ROUNDS
    met = False if failed else (True if enough else None)
    return {"mode": mode, "met": met, "families": sorted(measured), "failed": failed,
            "min_rounds": rounds, "needs": {"families": FIGURE_MIN_FAMILIES,
                                            "rounds": FIGURE_MIN_ROUNDS,
                                            "slack": FIGURE_SLACK}}


# ----------------------------------------------------------------- paired

def median_interval(values, confidence=PAIRED_CONFIDENCE):
    """(lo, hi, coverage): a distribution-free interval for the median of
    the values, the order statistics x(k) and x(n+1-k) for the largest k
    whose coverage, 1 - 2 P(Binomial(n, 1/2) < k), is at least confidence.
    With too few values for that (n <= 5 at 95%), the whole range and the
    coverage it has (5 values: 93.75%)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None, None, 0.0

    def coverage(k):
        return max(0.0, 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n)

    best = 1
    while best < (n + 1) // 2 and coverage(best + 1) >= confidence:
        best += 1
    return xs[best - 1], xs[n - best], coverage(best)


def paired(runs, mode="xseg"):
    """Per workload, mode's throughput over the faster PyTorch mode *of the
    same round* (the modes of one round run back to back, so a machine that
    is slower for a while slows them all): the per-round ratios, their
    median, a distribution-free interval for it (median_interval), and the
    verdict that interval allows on the figure's 1% (met: all of it at or
    above 1 - FIGURE_SLACK; not met: all of it below; undecided: it holds
    the line, the rounds cannot tell at this noise).  Peak over
    expandable's per round too.  Only rounds where mode and both peers ran
    without error count."""
    by = {}
    for r in runs:
        if "error" in r or "round" not in r or "throughput" not in r:
            continue
        by.setdefault(r["workload"], {}).setdefault(r["round"], {})[r["mode"]] = r
    out = {}
    for w in in_table_order(by):
        if w == "probe":
            continue
        thr, peak, best_peers = [], [], []
        for rnd in sorted(by[w]):
            got = by[w][rnd]
            if mode not in got or not all(p in got for p in PEERS):
                continue
            best = max(PEERS, key=lambda p: got[p]["throughput"])
            thr.append(got[mode]["throughput"] / got[best]["throughput"])
            exp_peak = got["expandable"]["peak_device_bytes"]
            peak.append(got[mode]["peak_device_bytes"] / exp_peak if exp_peak else None)
            best_peers.append(best)
        if not thr:
            continue
        lo, hi, cov = median_interval(thr)
        verdict = "met" if within_slack(lo) else ("undecided" if within_slack(hi) else "not met")
        peaks = [x for x in peak if x is not None]
        out[w] = {"mode": mode, "rounds": len(thr), "ratios": thr,
                  "median": statistics.median(thr), "lo": lo, "hi": hi, "coverage": cov,
                  "verdict": verdict, "best_peers": best_peers,
                  "peak_vs_expandable": statistics.median(peaks) if peaks else None,
                  "peak_vs_expandable_max": max(peaks) if peaks else None}
    return out


def paired_line(w, p):
    """One line of the paired comparison of workload w."""
    peak = ""
    if p["peak_vs_expandable"] is not None:
        peak = (f"; peak / expandable's {p['peak_vs_expandable']:.4f} "
                f"(max {p['peak_vs_expandable_max']:.4f})")
    return (f"{w}: paired, {p['mode']} / the round's faster peer over {p['rounds']} rounds: "
            f"median {p['median']:.3f}, {100 * p['coverage']:.1f}% interval "
            f"{p['lo']:.3f}..{p['hi']:.3f}: {p['verdict'].upper()} "
            f"(the figure needs >= {1 - FIGURE_SLACK:.2f}){peak}")


def paired_all(runs):
    """paired() for every xseg mode in runs: {mode: {workload: ...}}."""
    modes = sorted({r.get("mode") for r in runs if is_xseg(r.get("mode") or "")})
    return {m: paired(runs, m) for m in modes}


def paired_lines(runs):
    """The paired comparison's lines for every xseg mode and workload."""
    return [paired_line(w, p) for by_w in paired_all(runs).values() for w, p in by_w.items()]


# ----------------------------------------------------------------- tables

def workload_order(results):
    """The workloads of results: the known ones in WORKLOADS order, then others."""
    return in_table_order({w for (w, _) in results})


def in_table_order(workloads):
    """Workload names: the known ones in WORKLOADS order, then the others sorted."""
    present = set(workloads)
    return [w for w in WORKLOADS if w in present] + sorted(present - set(WORKLOADS))


def rows(results, w):
    """(mode, result, percent against native or None) of workload w, the
    three modes first, then the variants by name."""
    native = results.get((w, "native"), {})
    variants = sorted(m for (wl, m) in results if wl == w and m not in MODES)
    for m in list(MODES) + variants:
        r = results.get((w, m))
        if r is None:
            continue
        rel = (100 * (r["throughput"] / native["throughput"] - 1)
               if "throughput" in native and "error" not in native and "error" not in r
               else None)
        yield m, r, rel


def fmt_gib(n):
    return f"{n / GiB:8.3f}"


def fmt_pct(x):
    return f"{100 * x:+.2f}%"


def spread_text(r):
    """'min..max (spread%)' of a row's throughput over its rounds."""
    lo, hi = r.get("throughput_min", r["throughput"]), r.get("throughput_max", r["throughput"])
    sp = r.get("throughput_spread")
    return f"{lo:.1f}..{hi:.1f} ({100 * sp:.1f}%)" if sp is not None else f"{lo:.1f}..{hi:.1f}"


def rounds_text(r):
    failed = r.get("rounds_failed", 0)
    return f"{r.get('rounds', 1)}" + (f"+{failed}err" if failed else "")


def summary_line(w, v, results, mode="xseg"):
    """One line per workload: the figure's verdict with its numbers."""
    f = v.get("figure", {}).get(mode)
    if f is None:
        return f"{w}: figure n/a (no {mode} result)" if w != "probe" else f"{w}: measurements only"
    if f["met"] is None:
        return f"{w}: figure n/a (missing: {', '.join(f['missing'])})"
    r, best = results[(w, mode)], results[(w, f["best_peer"])]
    exp = results[(w, "expandable")]
    unit = r.get("throughput_unit", "")
    return (f"{w}: figure {'MET' if f['met'] else 'NOT MET'}: {mode} {r['throughput']:.1f} vs "
            f"{f['best_peer']} {best['throughput']:.1f} {unit} "
            f"({fmt_pct(f['throughput_vs_best_peer'] - 1)}, needs >= {fmt_pct(-FIGURE_SLACK)}"
            f"{'' if f['throughput_ok'] else ': NO'}); peak {r['peak_device_bytes'] / GiB:.3f} vs "
            f"expandable {exp['peak_device_bytes'] / GiB:.3f} GiB "
            f"({'<=' if f['memory_ok'] else '>: NO'}); outputs "
            f"{OUTPUT_WORD[v['outputs_identical']]}; {f['rounds']} rounds")


def overall_line(o):
    word = {True: "MET", False: "NOT MET", None: "not proven"}[o["met"]]
    n = len(o["families"])
    text = (f"figure ({o['mode']}): {word} on {n} famil{'y' if n == 1 else 'ies'} "
            f"({', '.join(o['families']) or '-'}), >= {o['min_rounds']} rounds each")
    if o["failed"]:
        text += f"; not met on {', '.join(o['failed'])}"
    if o["met"] is None:
        text += (f" (needs >= {o['needs']['families']} families and "
                 f">= {o['needs']['rounds']} rounds)")
    return text


def table(results, verdict):
    """The text table: per (workload, mode) the medians over rounds with
    the throughput's min..max and spread, then each workload's outputs
    check and figure line."""
    mw = max([10] + [len(m) for (_, m) in results])  # variant names are longer
    head = (f"{'workload':8s} {'mode':{mw}s} {'n':>5s} {'peak dev GiB':>12s} {'reserved':>9s} "
            f"{'allocated':>9s} {'throughput':>12s} {'vs native':>9s}  {'min..max (spread)':28s} "
            f"output")
    lines = [head, "-" * len(head)]
    for w in workload_order(results):
        for m, r, pct in rows(results, w):
            if "error" in r:
                lines.append(f"{w:8s} {m:{mw}s} ERROR: {r['error'][:90]}")
                continue
            rel = f"{pct:+8.2f}%" if pct is not None else f"{'-':>9s}"
            lines.append(f"{w:8s} {m:{mw}s} {rounds_text(r):>5s} "
                         f"{fmt_gib(r['peak_device_bytes']):>12s} "
                         f"{fmt_gib(r.get('peak_reserved_bytes', 0)):>9s} "
                         f"{fmt_gib(r.get('peak_allocated_bytes', 0)):>9s} "
                         f"{r['throughput']:12.1f} {rel}  {spread_text(r):28s} "
                         f"{str(r.get('output_hash'))[:12]}")
        if w in verdict:
            v = verdict[w]
            note = f" ({v['outputs_note']})" if v.get("outputs_note") else ""
            lines.append(f"{'':8s} outputs: {OUTPUT_WORD[v['outputs_identical']]}{note}")
            lines.append(f"{'':8s} {summary_line(w, v, results)}")
    units = {w: next((r["throughput_unit"] for (wl, _), r in results.items()
                      if wl == w and "throughput_unit" in r), "") for w in workload_order(results)}
    lines.append("throughput: " + "; ".join(f"{w} in {u}" for w, u in units.items() if u))
    lines.append(overall_line(overall(verdict)))
    return "\n".join(lines)


def summary(results, verdict):
    """The compact lines: one per workload, then the figure over the run."""
    out = [summary_line(w, v, results) for w, v in verdict.items()]
    return out + [overall_line(overall(verdict))]


def markdown(results, verdict):
    """The results as a Markdown table (for docs/pytorch.md): medians over
    the rounds, with the throughput's min..max and spread."""
    lines = ["| workload | allocator | rounds | peak device memory (GiB, median) | "
             "peak reserved (GiB) | throughput (median) | min..max (spread) | vs native | "
             "outputs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for w in workload_order(results):
        same = verdict.get(w, {}).get("outputs_identical")
        for m, r, pct in rows(results, w):
            if "error" in r:
                lines.append(f"| {w} | {m} | 0 | error: {r['error'][:60]} | | | | | |")
                continue
            rel = f"{pct:+.2f}%" if pct is not None else ""
            lines.append(
                f"| {w} | {m} | {rounds_text(r)} | {r['peak_device_bytes'] / GiB:.3f} | "
                f"{r.get('peak_reserved_bytes', 0) / GiB:.3f} | "
                f"{r['throughput']:.1f} {r.get('throughput_unit', '')} | {spread_text(r)} | "
                f"{rel} | {OUTPUT_WORD[same]} ({str(r.get('output_hash'))[:10]}) |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def from_json(doc):
    """The aggregated results of a bench_models.py JSON, keyed (workload, mode)."""
    return {(r["workload"], r["mode"]): r for r in doc["results"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="results written by bench_models.py --out")
    ap.add_argument("--markdown", action="store_true", help="print the Markdown table too")
    args = ap.parse_args(argv)
    with open(args.json) as f:
        doc = json.load(f)
    results = from_json(doc)
    verdict = compare(results)
    print(table(results, verdict))
    lines = paired_lines(doc.get("runs", []))
    if lines:
        print()
        print("\n".join(lines))
    if args.markdown:
        print()
        print(markdown(results, verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
