#!/usr/bin/env python3
"""report.py: turns the GPU benchmark's raw JSON lines into the deliverables:
results.json (everything, with the machine and the command), results.csv
(one row per measurement), tables.md (the side-by-side tables, the
targets of issue 3 and, when gpu-check replayed it, the workload corpus:
rows marked "corpus":true) and bench.png (growth time and device memory
per shared trace; an SVG by hand when matplotlib is missing).

usage: report.py RAW.jsonl STAGES.tsv ENV.txt OUTDIR COMMAND...
"""
import csv
import datetime
import json
import os
import sys

ALLOCS = ["xseg", "async", "torch", "torch-exp", "cudamalloc"]
LABEL = {"xseg": "xseg", "async": "cudaMallocAsync", "torch": "PyTorch native",
         "torch-exp": "PyTorch expandable", "cudamalloc": "cudaMalloc",
         "xseg-keep": "xseg, release_threshold:unlimited (extra)"}
EXTRA = ["xseg-keep"]  # rows in the tables only, not in the plot
SIZES = [(512, "512 B"), (1 << 20, "1 MiB"), (64 << 20, "64 MiB")]
GIB = float(1 << 30)


def load(raw):
    rows = []
    if os.path.exists(raw):
        for line in open(raw, encoding="utf-8", errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def pick(rows, test, **kw):
    out = {}
    for r in rows:
        if r.get("test") == test and all(r.get(k) == v for k, v in kw.items()):
            out[r["alloc"]] = r
    return out


def fmt(v, nd=1):
    if v is None:
        return "n/a"
    if isinstance(v, float) and (v >= 1e5):
        return "%.3g" % v
    return ("%." + str(nd) + "f") % v


def hot_tables(rows, nthreads):
    lines = ["| allocator | " + " | ".join(s for _, s in SIZES) + " |",
             "| --- |" + " --- |" * len(SIZES)]
    for a in ALLOCS:
        cells = []
        for size, _ in SIZES:
            r = pick(rows, "hot", size=size, threads=nthreads).get(a)
            if r is None:
                cells.append("n/a")
            elif nthreads == 1:
                cells.append("%s ns" % fmt(r["ns_per_pair"]))
            else:
                cells.append("%s ns/thread, %.2f M pairs/s" % (fmt(r["ns_per_pair"]),
                                                              r["pairs_per_s"] / 1e6))
        lines.append("| %s | %s |" % (LABEL[a], " | ".join(cells)))
    return lines


def growth_table(rows):
    lines = ["| allocator | case | alloc (ms) | alloc GiB/s | free + give back (ms) | "
             "give back GiB/s | taken (GiB) | left after (MiB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for case in ("1GiBx40", "2MiBx10000"):
        got = pick(rows, "growth", case=case)
        for a in ALLOCS:
            r = got.get(a)
            if r is None:
                lines.append("| %s | %s | n/a | | | | | |" % (LABEL[a], case))
                continue
            lines.append("| %s | %s | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f |" % (
                LABEL[a], case, r["alloc_ms"], r["alloc_gib_s"], r["giveback_ms"],
                r["giveback_gib_s"], r["taken_gib"], r["left_after_release_mib"]))
    return lines


def honest(r):
    """One measure for every allocator: the larger of its own peak of
    physical memory held in the timed pass (own_peak_bytes: xseg's
    mapped_bytes.peak, PyTorch's reserved peak, the pool's reserved high
    watermark; 0 for cudaMalloc, which has none) and the cuMemGetInfo
    drop sampled after each allocation (a second pass; cudaMalloc's is
    the timed pass itself).  Returns (bytes, ratio)."""
    dev = max(r.get("own_peak_bytes") or 0, r["peak_device_bytes"])
    live = r["peak_live_bytes"]
    return dev, (dev / float(live) if live else 0.0)


def replay_table(rows):
    lines = ["| allocator | trace | peak device (GB) | peak live (GB) | ratio | replay (s) | "
             "own peak, timed pass (GB) | sampled drop (GB) | OOMs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for trace in traces_of(rows):
        got = pick(rows, "replay", trace=trace)
        for a in ALLOCS + [e for e in EXTRA if e in got]:
            r = got.get(a)
            if r is None:
                lines.append("| %s | %s | n/a | | | | | | |" % (LABEL[a], short(trace)))
                continue
            dev, ratio = honest(r)
            t = "%.3f" % r["replay_s"]
            if r["partial"]:
                t = "%.1f (stopped after %d of %d events; whole trace about %.0f s)" % (
                    r["replay_s"], r["events_done"], r["events"], r["replay_s_full"])
            elif r["sampled_in_timed"]:
                t += " (with cuMemGetInfo after each alloc)"
            lines.append("| %s | %s | %.3f | %.3f | %.3f | %s | %s | %.3f%s | %d |" % (
                LABEL[a], short(trace), dev / 1e9, r["peak_live_bytes"] / 1e9, ratio, t,
                "%.3f" % (r["own_peak_bytes"] / 1e9) if r["own_peak_bytes"] else "-",
                r["peak_device_bytes"] / 1e9,
                " (timed pass)" if r["sampled_in_timed"] else " (2nd pass)", r["ooms"]))
    return lines


def traces_of(rows):
    return sorted({r["trace"] for r in rows if r.get("test") == "replay" and not r.get("corpus")})


def short(trace):
    return trace.replace(".csv.gz", "")


def verdict(ok):
    return "n/a" if ok is None else ("met" if ok else "NOT met")


def targets(rows):
    out = ["| target | measured | verdict |", "| --- | --- | --- |"]
    for size, name in SIZES:
        h = pick(rows, "hot", size=size, threads=1)
        x = h.get("xseg")
        for peer in ("async", "torch"):
            p = h.get(peer)
            ok = None if x is None or p is None else p["ns_per_pair"] >= 10 * x["ns_per_pair"]
            meas = "n/a" if ok is None else "%.1fx (%s ns vs %s ns)" % (
                p["ns_per_pair"] / x["ns_per_pair"], fmt(x["ns_per_pair"]), fmt(p["ns_per_pair"]))
            out.append("| hot %s, 1 thread: >= 10x faster than %s | %s | %s |" % (
                name, LABEL[peer], meas, verdict(ok)))
    for size, name in SIZES:
        x = pick(rows, "hot", size=size, threads=16).get("xseg")
        ok = None if x is None else x["pairs_per_s"] >= 10e6
        out.append("| hot %s, %s threads: >= 10 M pairs/s aggregate | %s | %s |" % (
            name, 16,
            "n/a" if x is None else "%.2f M/s" % (x["pairs_per_s"] / 1e6), verdict(ok)))
    g = pick(rows, "growth", case="1GiBx40").get("xseg")
    out.append("| 40 x 1 GiB in <= 10 ms | %s | %s |" % (
        "n/a" if g is None else "%.2f ms" % g["alloc_ms"],
        verdict(None if g is None else g["alloc_ms"] <= 10)))
    out.append("| give those 40 GiB back in <= 30 ms | %s | %s |" % (
        "n/a" if g is None else "%.2f ms" % g["giveback_ms"],
        verdict(None if g is None else g["giveback_ms"] <= 30)))
    for trace in traces_of(rows):
        got = pick(rows, "replay", trace=trace)
        x, t = got.get("xseg"), got.get("torch")
        xr = None if x is None else honest(x)[1]
        out.append("| %s: device memory <= 1.02 x peak live | %s | %s |" % (
            short(trace), "n/a" if x is None else "%.3f" % xr,
            verdict(None if x is None else xr <= 1.02)))
        ok = None if x is None or t is None else x["replay_s"] < t["replay_s"]
        out.append("| %s: replay faster than PyTorch native | %s | %s |" % (
            short(trace), "n/a" if ok is None else "%.3f s vs %.3f s" % (
                x["replay_s"], t["replay_s"]), verdict(ok)))
    return out


DRV = ["create", "map", "set_access", "unmap", "release", "event_record", "event_query",
       "event_sync", "stream_sync"]


def drv_table(rows):
    out = ["| run | " + " | ".join(DRV) + " |", "| --- |" + " --- |" * len(DRV)]
    for r in rows:
        if not r.get("alloc", "").startswith("xseg") or "drv_map" not in r:
            continue
        what = r.get("trace", r.get("case", "?")).replace(".csv.gz", "")
        out.append("| %s: %s %s | %s |" % (r["alloc"], r["test"], what, " | ".join(
            str(r.get("drv_" + k, "")) for k in DRV)))
    return out


CORPUS_ALLOCS = ["xseg", "async", "torch", "torch-exp"]


def drv_cell(r):
    """xseg's driver calls in the timed pass, the non-zero kinds."""
    if "drv_map" not in r:
        return "-"
    calls = ["%s %s" % (k, r["drv_" + k]) for k in DRV if r.get("drv_" + k)]
    return ", ".join(calls) if calls else "none"


def replay_time(r):
    if r["partial"]:
        return "%.1f (stopped after %d of %d events)" % (r["replay_s"], r["events_done"],
                                                         r["events"])
    return "%.3f" % r["replay_s"]


def corpus_by_trace(corpus):
    """{trace: {alloc: row}} of the corpus replays."""
    out = {}
    for r in corpus:
        if r.get("test") == "replay":
            out.setdefault(r["trace"], {})[r["alloc"]] = r
    return dict(sorted(out.items()))


def corpus_table(corpus):
    lines = ["| trace | allocator | peak live (GB) | peak device (GB) | ratio | replay (s) | "
             "driver calls | OOMs |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for trace, got in corpus_by_trace(corpus).items():
        for a in CORPUS_ALLOCS:
            r = got.get(a)
            if r is None:
                lines.append("| %s | %s | n/a | | | | | |" % (short(trace), LABEL[a]))
                continue
            dev, ratio = honest(r)
            lines.append("| %s | %s | %.3f | %.3f | %.3f | %s | %s | %d |" % (
                short(trace), LABEL[a], r["peak_live_bytes"] / 1e9, dev / 1e9, ratio,
                replay_time(r), drv_cell(r), r["ooms"]))
    return lines


def corpus_targets(corpus):
    """Issue 13's figures per corpus trace: xseg's ratio <= 1.01 and below
    every peer's, its replay time <= PyTorch native's."""
    out = ["| trace | xseg ratio <= 1.01 | below every peer (best peer) | "
           "xseg replay <= PyTorch native's |", "| --- | --- | --- | --- |"]
    for trace, got in corpus_by_trace(corpus).items():
        x, t = got.get("xseg"), got.get("torch")
        if x is None:
            out.append("| %s | n/a | n/a | n/a |" % short(trace))
            continue
        xr = honest(x)[1]
        peers = [(honest(got[a])[1], LABEL[a]) for a in CORPUS_ALLOCS[1:] if a in got]
        best = min(peers) if peers else None
        out.append("| %s | %.3f: %s | %s | %s |" % (
            short(trace), xr, verdict(xr <= 1.01),
            "n/a" if best is None else "%s (%.3f, %s)" % (verdict(xr < best[0]), best[0],
                                                         best[1]),
            "n/a" if t is None else "%s (%.3f s vs %.3f s)" % (
                verdict(x["replay_s"] <= t["replay_s"]), x["replay_s"], t["replay_s"])))
    return out


def corpus_section(corpus):
    return ["## Workload corpus (tools/traces/corpus)", "",
            "Each trace through each allocator in its own process (`bench --test replay`); "
            "peak device and ratio measured as in the trace replay table; driver calls: "
            "xseg's, in the timed pass.", ""] + corpus_table(corpus) + [
            "", "### Corpus targets (issue 13)", ""] + corpus_targets(corpus) + [""]


def diag_table(rows):
    got = pick(rows, "diag-stream")
    out = ["| allocator | survived |", "| --- | --- |"]
    for a in ALLOCS:
        out.append("| %s | %s |" % (LABEL[a], "yes" if a in got else
                                     "NO (crashed or failed: see the log)"))
    return out


def env_of(rows):
    for r in rows:
        if r.get("test") == "env":
            return r
    return {}


def markdown(rows, meta, stages):
    corpus = [r for r in rows if r.get("corpus")]
    rows = [r for r in rows if not r.get("corpus")]  # every table above the corpus's
    e = env_of(rows)
    L = ["# GPU benchmark results", "",
         "GPU: %s (compute capability %s, %s multiprocessors, %.1f GiB); driver %s, "
         "CUDA driver API %s, runtime %s; PyTorch %s." % (
             e.get("gpu", "?"), e.get("cc", "?"), e.get("sms", "?"),
             e.get("total_bytes", 0) / GIB, meta.get("driver", "?"), e.get("driver_api", "?"),
             e.get("runtime", "?"), meta.get("torch", "?")),
         "Date: %s. Command: `%s`." % (meta["date"], meta["command"]), ""]
    L += ["## Hot path: alloc + free pair, one thread (median ns per pair)", ""]
    L += hot_tables(rows, 1) + [""]
    nt = sorted({r["threads"] for r in rows if r.get("test") == "hot" and r["threads"] > 1})
    for n in nt:
        L += ["## Hot path: %d threads, each on its own stream" % n, ""]
        L += hot_tables(rows, n) + [""]
    L += ["## Growth and release", ""] + growth_table(rows) + [""]
    L += ["## Trace replay", "",
          "peak device and ratio: the larger of the allocator's own peak of physical memory "
          "held in the timed pass and the cuMemGetInfo drop sampled after each allocation "
          "(a second pass, except for cudaMalloc, which has no own peak and is sampled in "
          "its timed pass); both are shown.", ""] + replay_table(rows) + [""]
    L += ["## Targets (issue 3)", ""] + targets(rows) + [""]
    L += ["## xseg's driver calls", "",
          "Timed replay pass; first grow + give back of each growth case.", ""]
    L += drv_table(rows) + [""]
    if corpus:
        L += corpus_section(corpus)
    L += ["## Diagnostic: a stream destroyed after its cached block was freed", ""]
    L += diag_table(rows) + [""]
    L += ["## Stages", "", "| stage | status | seconds |", "| --- | --- | --- |"]
    L += ["| %s | %s | %s |" % (s["stage"], s["status"], s["seconds"]) for s in stages]
    for r in rows + corpus:
        if r.get("error"):
            L.append("")
            L.append("- %s %s: %s" % (r["alloc"], r["test"], r["error"]))
    return "\n".join(L) + "\n"


def write_csv(rows, path):
    keys = ["alloc", "test"]
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def plot_data(rows):
    growth = {c: pick(rows, "growth", case=c) for c in ("1GiBx40", "2MiBx10000")}
    replay = {t: pick(rows, "replay", trace=t) for t in traces_of(rows)}
    return growth, replay


def plot_png(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    growth, replay = plot_data(rows)
    panels = [(c, k) for c in growth for k in ("alloc_ms", "giveback_ms")]
    fig, axes = plt.subplots(1, len(panels) + len(replay),
                             figsize=(3.3 * (len(panels) + len(replay)), 4.2))
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"]
    for ax, (case, key) in zip(axes, panels):
        vals = [growth[case].get(a, {}).get(key, 0) for a in ALLOCS]
        ax.bar(range(len(ALLOCS)), vals, color=colors)
        ax.set_yscale("log")
        ax.set_title("%s: %s" % (case, "allocate" if key == "alloc_ms" else "free + give back"),
                     fontsize=9)
        ax.set_ylabel("ms (log)")
        ax.set_xticks(range(len(ALLOCS)))
        ax.set_xticklabels([LABEL[a] for a in ALLOCS], rotation=45, ha="right", fontsize=7)
    for ax, trace in zip(axes[len(panels):], replay):
        got = replay[trace]
        vals = [honest(got[a])[0] / 1e9 if a in got else 0 for a in ALLOCS]
        live = max((r["peak_live_bytes"] for r in got.values()), default=0) / 1e9
        ax.bar(range(len(ALLOCS)), vals, color=colors)
        ax.axhline(live, color="black", linestyle="--", linewidth=1, label="peak live")
        ax.set_title("%s: device memory" % short(trace), fontsize=9)
        ax.set_ylabel("GB")
        ax.set_ylim(0, max(vals + [live]) * 1.15 if vals else 1)
        ax.legend(fontsize=7)
        ax.set_xticks(range(len(ALLOCS)))
        ax.set_xticklabels([LABEL[a] for a in ALLOCS], rotation=45, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_svg(rows, path):
    """Fallback without matplotlib: plain bars, one group per panel."""
    growth, replay = plot_data(rows)
    groups = [("%s alloc (ms)" % c, [growth[c].get(a, {}).get("alloc_ms", 0) for a in ALLOCS])
              for c in growth]
    groups += [("%s give back (ms)" % c,
                [growth[c].get(a, {}).get("giveback_ms", 0) for a in ALLOCS]) for c in growth]
    groups += [("%s device GB" % short(t),
                [honest(replay[t][a])[0] / 1e9 if a in replay[t] else 0 for a in ALLOCS])
               for t in replay]
    w, h = 220 * len(groups), 300
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="10">' % (w, h)]
    for gi, (title, vals) in enumerate(groups):
        x0, top = gi * 220 + 10, max(vals + [1e-9])
        out.append('<text x="%d" y="14">%s</text>' % (x0, title))
        for i, v in enumerate(vals):
            bh = 220 * v / top
            out.append('<rect x="%d" y="%.1f" width="30" height="%.1f" fill="#4477aa"/>' % (
                x0 + i * 40, 250 - bh, bh))
            out.append('<text x="%d" y="265" font-size="8">%s</text>' % (x0 + i * 40, ALLOCS[i]))
            out.append('<text x="%d" y="%.1f" font-size="8">%.3g</text>' % (
                x0 + i * 40, 245 - bh, v))
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def read_stages(path):
    stages = []
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                stages.append({"stage": parts[0], "status": parts[1], "seconds": parts[2]})
    return stages


def read_env(path):
    meta = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    return meta


def main(argv):
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if len(argv) < 5:
        sys.exit("usage: report.py RAW.jsonl STAGES.tsv ENV.txt OUTDIR COMMAND... (--help)")
    raw, stages_p, env_p, outdir = argv[1:5]
    rows = load(raw)
    meta = read_env(env_p)
    meta.setdefault("date", datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"))
    meta["command"] = " ".join(argv[5:]) or "tools/gpu-check OUTDIR"
    stages = read_stages(stages_p)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "env": env_of(rows), "stages": stages,
                   "results": [r for r in rows if r.get("test") != "env"]}, f, indent=1)
    write_csv([r for r in rows if r.get("test") != "env"], os.path.join(outdir, "results.csv"))
    md = markdown(rows, meta, stages)
    open(os.path.join(outdir, "tables.md"), "w").write(md)
    shared = [r for r in rows if not r.get("corpus")]
    try:
        plot_png(shared, os.path.join(outdir, "bench.png"))
    except Exception as exc:  # no matplotlib, or nothing to draw
        print("report.py: PNG plot failed (%s): writing bench.svg" % exc)
        plot_svg(shared, os.path.join(outdir, "bench.svg"))
    print(md)


if __name__ == "__main__":
    main(sys.argv)
