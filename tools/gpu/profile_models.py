#!/usr/bin/env python3
"""profile_models.py: where the time of the model benchmark goes, per
allocator (issue 13: "profile before you fix").

Runs bench_models.py's quick workloads (llama, gpt2, moe, bert, vit) under
PyTorch's profiler (CPU and CUDA activities), one subprocess per (mode,
round), the modes in rotating order, and compares, per workload and mode:

  - the GPU's work: the summed duration of every kernel (and of the
    memcpy/memset activities), by kernel name: if where the allocator puts
    blocks (addresses, alignment, page handles) made kernels slower, it
    shows here, free of the CPU's noise;
  - how busy the GPU was: the union of kernel intervals over the span of
    the profiled run (a workload at 30% is bound by the CPU, and an
    allocator that costs CPU time slows it);
  - the allocation entry points on the CPU: calls and self time of the
    aten ops that allocate (aten::empty, empty_strided, ...), whose self
    time includes the allocator's;
  - the runtime and driver calls the profiler saw (cudaMalloc, cudaFree,
    cudaStreamSynchronize, cuMem*, cudaLaunchKernel): count and time;
  - the wall time of the profiled run and, from a separate unprofiled
    warm-up run in the same process, bench_models' throughput.

Each workload runs twice in its process: once unprofiled (kernels compiled,
cuBLAS set up; its throughput reported), then once under the profiler from
a fresh start. The trace is exported as Chrome JSON and reduced here
(summarize_trace), then deleted.

    PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
        python3 tools/gpu/profile_models.py --out OUT --rounds 3 \\
        --workloads llama gpt2 bert --modes native expandable xseg

Writes OUT/profile.json (every run) and OUT/profile.md (medians over the
rounds). Needs torch and transformers; nothing is downloaded.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(HERE), "python")

# aten ops whose self time includes the allocator's (they create storage)
ALLOC_OPS = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
             "aten::new_empty_strided", "aten::resize_", "aten::zeros", "aten::ones",
             "aten::full", "aten::zeros_like", "aten::ones_like", "aten::full_like")
# trace categories of GPU work
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# runtime / driver calls worth naming (the rest are summed as "other")
API_CALLS = ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
             "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
             "cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
             "cuLaunchKernelEx", "cudaMemsetAsync", "cudaEventRecord", "cudaEventQuery",
             "cudaStreamWaitEvent", "cudaMemGetInfo", "cuMemCreate", "cuMemMap",
             "cuMemSetAccess", "cuMemUnmap", "cuMemRelease", "cuEventQuery",
             "cuEventRecord", "cuMemGetInfo_v2")
TOP_KERNELS = 12


# ---------------------------------------------------------------- reduction

def union_us(intervals):
    """Total length covered by [start, end) intervals (microseconds)."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarize_trace(events):
    """Reduce Chrome-trace events (dicts with ph, cat, name, ts, dur in us)
    to the figures above: gpu_us (summed GPU activity), gpu_busy_us (their
    union), span_us (first to last event of any kind), kernels {name: [n,
    us]}, alloc_ops {name: [n, self us]}, api {name: [n, us]} (other runtime
    and driver calls under "other"), cpu_ops (count)."""
    out = {"gpu_us": 0.0, "gpu_busy_us": 0.0, "span_us": 0.0, "kernels": {},
           "alloc_ops": {}, "api": {}, "cpu_ops": 0}
    gpu, lo, hi = [], None, None
    cpu = []
    for ev in events:
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        ts, dur = float(ev["ts"]), float(ev["dur"])
        lo = ts if lo is None else min(lo, ts)
        hi = ts + dur if hi is None else max(hi, ts + dur)
        cat, name = ev.get("cat", ""), ev.get("name", "")
        if cat in GPU_CATS:
            gpu.append((ts, ts + dur))
            out["gpu_us"] += dur
            k = out["kernels"].setdefault(name if cat == "kernel" else f"[{cat}]", [0, 0.0])
            k[0] += 1
            k[1] += dur
        elif cat in ("cuda_runtime", "cuda_driver"):
            a = out["api"].setdefault(name if name in API_CALLS else "other", [0, 0.0])
            a[0] += 1
            a[1] += dur
        elif cat == "cpu_op":
            out["cpu_ops"] += 1
            cpu.append((ev.get("tid"), ts, dur, name))
    out["gpu_busy_us"] = union_us(gpu)
    out["span_us"] = (hi - lo) if lo is not None else 0.0
    for name, n, self_us in self_times(cpu):
        if name in ALLOC_OPS:
            a = out["alloc_ops"].setdefault(name, [0, 0.0])
            a[0] += n
            a[1] += self_us
    return out


def self_times(cpu):
    """(name, 1, self us) of each CPU op (tid, ts, dur, name): its duration
    minus its direct children's on the same thread (ops nest as
    intervals; a stack of the open ones per thread)."""
    res = []
    by_tid = {}
    for tid, ts, dur, name in cpu:
        by_tid.setdefault(tid, []).append((ts, -dur, name))
    for evs in by_tid.values():
        evs.sort()
        stack = []  # [end, name, children's us, dur]
        for ts, neg, name in evs:
            while stack and ts >= stack[-1][0]:
                _, n, child, d = stack.pop()
                res.append((n, 1, max(0.0, d - child)))
            if stack:
                stack[-1][2] += -neg
            stack.append([ts - neg, name, 0.0, -neg])
        while stack:
            _, n, child, d = stack.pop()
            res.append((n, 1, max(0.0, d - child)))
    return res



# ---------------------------------------------------------------- child

def profiled(torch, fn):
    """fn() under the profiler: (fn's result, the reduced trace)."""
    from torch.profiler import ProfilerActivity, profile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            result = fn()
            torch.cuda.synchronize()
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    return result, summarize_trace(events)


def xseg_driver(stats):
    st = stats()
    keys = [k for k in st if k.startswith("xseg.driver")]
    return {k: st[k] for k in keys}


def child(args):
    sys.path.insert(0, PYDIR)
    import bench_models as bm
    torch, stats, info = bm.setup_mode(args.mode, None)
    done = []
    for w in args.workload.split(","):
        row = dict(info, workload=w, mode=args.mode)
        try:
            bm.fresh_start(torch)
            warm = bm.RUNNERS[w](torch, stats, args.seed, 2, True)
            row.update(throughput=warm.get("throughput"), unit=warm.get("throughput_unit"),
                       output_hash=warm.get("output_hash"))
            bm.fresh_start(torch)
            before = xseg_driver(stats)
            t0 = time.perf_counter()
            res, prof = profiled(torch, lambda: bm.RUNNERS[w](torch, stats, args.seed, 1, True))
            row["profiled_wall_s"] = time.perf_counter() - t0
            after = xseg_driver(stats)
            row["xseg_driver_added"] = {k: after[k] - before.get(k, 0) for k in after
                                        if isinstance(after[k], (int, float))}
            row["profile"] = prof
            row["profiled_output_hash"] = res.get("output_hash")
        except BaseException as e:  # noqa: BLE001 (reported, the next workload runs)
            row["error"] = f"{type(e).__name__}: {e}"
            row["traceback"] = traceback.format_exc()
        done.append(row)
        with open(args.child_out, "w") as f:
            json.dump(done, f)
    return 0


# ---------------------------------------------------------------- parent

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x]
    return (max(xs) / min(xs) - 1) if len(xs) > 1 else 0.0


def per_call(pairs):
    n = sum(p[0] for p in pairs)
    return (sum(p[1] for p in pairs) / n) if n else None


def aggregate(runs):
    """Medians over the rounds per (workload, mode)."""
    groups = {}
    for r in runs:
        if "profile" in r:
            groups.setdefault((r["workload"], r["mode"]), []).append(r)
    rows = []
    for (w, m), rs in sorted(groups.items()):
        p = [r["profile"] for r in rs]
        alloc = [list(x["alloc_ops"].values()) for x in p]
        mem_api = [[v for k, v in x["api"].items()
                    if k.startswith(("cudaMalloc", "cudaFree", "cuMem"))] for x in p]
        rows.append({
            "workload": w, "mode": m, "rounds": len(rs),
            "throughput": median([r.get("throughput") for r in rs]),
            "throughput_spread": spread([r.get("throughput") for r in rs]),
            "unit": rs[0].get("unit"),
            "profiled_wall_s": median([r["profiled_wall_s"] for r in rs]),
            "gpu_ms": median([x["gpu_us"] / 1e3 for x in p]),
            "gpu_ms_spread": spread([x["gpu_us"] for x in p]),
            "gpu_busy": median([x["gpu_busy_us"] / x["span_us"] if x["span_us"] else None
                                for x in p]),
            "alloc_calls": median([sum(a[0] for a in al) for al in alloc]),
            "alloc_self_us_per_call": median([per_call(al) for al in alloc]),
            "mem_api_calls": median([sum(a[0] for a in ma) for ma in mem_api]),
            "mem_api_ms": median([sum(a[1] for a in ma) / 1e3 for ma in mem_api]),
            "sync_ms": median([sum(v[1] for k, v in x["api"].items() if "Synchronize" in k) / 1e3
                               for x in p]),
            "top_kernels": top_kernels(p),
            "hashes": sorted({r.get("output_hash") for r in rs}),
        })
    return rows


def top_kernels(profiles):
    """{kernel: median us} of the TOP_KERNELS longest (by the first run)."""
    first = profiles[0]["kernels"]
    names = sorted(first, key=lambda k: -first[k][1])[:TOP_KERNELS]
    return {k: median([p["kernels"].get(k, [0, 0.0])[1] for p in profiles]) for k in names}


def fmt(v, f="{:.3f}"):
    return "-" if v is None else f.format(v)


def markdown(rows):
    lines = ["| workload | mode | rounds | throughput (spread) | GPU work ms (spread) | GPU busy | "
             "alloc ops: calls, self us/call | memory API calls, ms | sync ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['mode']} | {r['rounds']} | "
            f"{fmt(r['throughput'], '{:.1f}')} ({r['throughput_spread']:.0%}) | "
            f"{fmt(r['gpu_ms'], '{:.1f}')} ({r['gpu_ms_spread']:.1%}) | "
            f"{fmt(r['gpu_busy'], '{:.0%}')} | {fmt(r['alloc_calls'], '{:.0f}')}, "
            f"{fmt(r['alloc_self_us_per_call'], '{:.2f}')} | "
            f"{fmt(r['mem_api_calls'], '{:.0f}')}, {fmt(r['mem_api_ms'], '{:.2f}')} | "
            f"{fmt(r['sync_ms'], '{:.1f}')} |")
    lines += ["", "Kernels (median us over the rounds), per workload, modes side by side:", ""]
    by_w = {}
    for r in rows:
        by_w.setdefault(r["workload"], []).append(r)
    for w, rs in by_w.items():
        names = list(rs[0]["top_kernels"])
        lines += [f"**{w}**", "", "| kernel | " + " | ".join(r["mode"] for r in rs) + " |",
                  "|---|" + "---|" * len(rs)]
        for k in names:
            vals = [r["top_kernels"].get(k) for r in rs]
            lines.append(f"| {k[:70]} | " + " | ".join(fmt(v, "{:.0f}") for v in vals) + " |")
        lines.append("")
    return "\n".join(lines)


def parent(args):
    sys.path.insert(0, PYDIR)
    import bench_models as bm
    os.makedirs(args.out, exist_ok=True)
    runs, started = [], time.time()
    # bench_report's rotation: modes, and workloads in each process, start one later each round
    for rnd, jobs in enumerate(bm.schedule(args.workloads, args.modes, args.rounds, True)):
        for mode, workloads in jobs:
            left = args.budget - (time.time() - started)
            if left < args.timeout:
                runs.append({"mode": mode, "round": rnd, "skipped": "budget"})
                continue
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
                child_out = tf.name
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--mode", mode,
                   "--workload", ",".join(workloads), "--child-out",
                   child_out, "--seed", str(args.seed)]
            try:
                p = subprocess.run(cmd, env=bm.mode_env(mode), timeout=min(left, args.timeout),
                                   capture_output=True, text=True)
                rc, err = p.returncode, p.stderr[-2000:]
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            try:
                with open(child_out) as f:
                    got = json.load(f)
            except (OSError, ValueError):
                got = [{"mode": mode, "error": f"no result (rc {rc}): {err}"}]
            os.unlink(child_out)
            for g in got:
                g["round"] = rnd
            runs += got
            print(f"round {rnd} {mode}: rc {rc}, {len(got)} results", flush=True)
            rows = aggregate(runs)
            with open(os.path.join(args.out, "profile.json"), "w") as f:
                json.dump({"args": vars(args), "runs": runs, "rows": rows}, f, indent=1)
            with open(os.path.join(args.out, "profile.md"), "w") as f:
                f.write(markdown(rows) + "\n")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", help="folder for profile.json and profile.md")
    ap.add_argument("--workloads", nargs="+", default=["llama", "gpt2", "bert"],
                    choices=["llama", "gpt2", "moe", "bert", "vit"])
    ap.add_argument("--modes", nargs="+", default=["native", "expandable", "xseg"],
                    choices=["native", "expandable", "xseg", "xseg-native"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--budget", type=float, default=400, help="seconds for all rounds")
    ap.add_argument("--timeout", type=float, default=150, help="seconds per process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if not args.out:
        ap.error("--out is required")
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
