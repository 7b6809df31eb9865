#!/usr/bin/env python3
"""native_proof.py: issue 16's proof of the native PyTorch allocator on a GPU.

Each case runs in a fresh process (xseg.install(native=True) first, so a
build or load failure fails the case, never falls back), bounded by its own
deadline; results go to OUT/results.jsonl (one JSON line per case) and
OUT/summary.md.  Cases:
  serve_bare  (not run by default) serve's allocations and caught OOMs
            alone, no model: isolates the OOM path.  XSEG_PROOF_CONF adds
            conf keys to every case, XSEG_PROOF_SERVE_EVENTS sets the OOM
            events wanted (100)
  serve     a serving loop under a cap (XSEG_CONF max_mapped): a request too
            large raises torch.OutOfMemoryError, is caught, the batch shrinks;
            N such events, no leak (xseg's allocated bytes back to the
            baseline), outputs equal to serve_ref (the same loop, no cap)
  compile   torch.compile(mode="reduce-overhead") of a transformer block
            equals eager
  cudnn     a small CNN with cudnn.benchmark=True trains
  snapshot  _record_memory_history + _snapshot(), read by torch.cuda._memory_viz,
            xseg's mapped runs among its segments
  stats     memory_stats & co natively (no monkeypatch), fraction, empty_cache,
            mem_get_info
  ipc       torch.multiprocessing: a 64 MiB tensor (a dedicated block:
            registrable_min) sent to a spawned process through a Queue; the
            child reads it and writes into it, the parent sees the writes; a
            small (arena) tensor is refused with a clear error
XSEG_PROOF_NO_FAULTHANDLER=1 leaves SIGSEGV / SIGABRT to a preloaded
tools/gpu/crash_stack.c (Python's faulthandler takes them otherwise).
Usage (repository root, libxseg built):
  XSEG_LIBRARY=$PWD/build/lib/libxseg.so.0 PYTHONPATH=$PWD/tools/python \\
      python3 tools/gpu/native_proof.py --out /tmp/native-proof [--cases serve,compile]
"""
import argparse
import faulthandler
import gc
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback

CASES = ("serve", "compile", "cudnn", "snapshot", "stats", "ipc")
DEADLINES = {"serve": 240, "serve_ref": 240, "serve_bare": 120, "compile": 300, "cudnn": 180, "snapshot": 120,
             "stats": 120, "ipc": 150}
GiB = 1 << 30
# OOM events of the serve cases (XSEG_PROOF_SERVE_EVENTS: more to reproduce
# a late failure, fewer for a quick run).
SERVE_EVENTS = int(os.environ.get("XSEG_PROOF_SERVE_EVENTS", "100"))


def setup(conf):
    # XSEG_PROOF_CONF: keys added to every case's conf, to bisect a failure
    # (e.g. reclaim:sync or thread_cache:off).
    extra = os.environ.get("XSEG_PROOF_CONF", "")
    os.environ["XSEG_CONF"] = f"{conf},{extra}" if extra else conf
    import xseg  # noqa: PLC0415
    mod = xseg.install(native=True)
    import torch  # noqa: PLC0415
    from xseg import _native  # noqa: PLC0415
    return xseg, torch, {"mode": _native.USED["mode"], "torch": torch.__version__,
                         "module_built_for": mod.built_torch_version()}


# ---- serve ----

def serve_loop(torch, events_wanted, too_large_bytes, bare=False):
    """Requests of 64..512 tokens, every 3rd one too large (its batch scratch
    is too_large_bytes); each batch takes a scratch buffer sized by its
    requests, outputs computed per request (so batching cannot change them).
    Returns (per-request output digests, OOM events, batches run)."""
    torch.manual_seed(0)
    d = 1024
    model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                torch.nn.Linear(4 * d, d)).cuda().eval()
    n_req = events_wanted * 3 + 30
    reqs = [(i, 64 + (i * 37) % 449, i % 3 == 2) for i in range(n_req)]
    digests, events, batches = {}, 0, 0
    queue, batch_size = list(reqs), 8
    with torch.no_grad():
        while queue:
            batch = queue[:batch_size]
            try:
                need = sum(too_large_bytes if big else n * d * 64 for _, n, big in batch)
                scratch = torch.empty(need, dtype=torch.uint8, device="cuda")
                for rid, n, _ in (() if bare else batch):
                    g = torch.Generator(device="cuda").manual_seed(rid)
                    x = torch.randn(n, d, device="cuda", generator=g)
                    y = model(x)
                    digests[rid] = hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest()[:16]
                del scratch
                queue = queue[len(batch):]
                batches += 1
                batch_size = min(8, batch_size * 2)
            except torch.OutOfMemoryError:
                events += 1
                if events <= 3 or events % 20 == 0:  # progress, in the case's stderr
                    print(f"serve: OOM event {events}, batch {len(batch)}, batches run "
                          f"{batches}", file=sys.stderr, flush=True)
                if len(batch) == 1:  # this request alone does not fit: rejected
                    digests[batch[0][0]] = "rejected"
                    queue = queue[1:]
                batch_size = max(1, len(batch) // 2)
    return digests, events, batches


def case_serve(out, cap_gib):
    xseg, torch, info = setup(f"max_mapped:{cap_gib}GB,verbose:off")
    torch.ones(1, device="cuda")
    base = torch.cuda.memory_allocated()
    digests, events, batches = serve_loop(torch, SERVE_EVENTS, (cap_gib + 2) * GiB)
    gc.collect()
    torch.cuda.synchronize()
    # torch keeps its cuBLAS workspaces (32 + 1 MiB on the H200) for the process: not a leak
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated()
    json.dump(digests, open(os.path.join(out, "serve_digests.json"), "w"))
    info.update(oom_events=events, batches=batches, allocated_baseline=base,
                allocated_after=after, no_leak=after == base, ooms=torch.cuda.memory_stats()
                ["num_ooms"], ok=events >= SERVE_EVENTS and after == base)
    return info


def case_serve_bare(out, cap_gib):
    """The serve loop's allocations and caught OOMs alone: no model, no
    generator, no copies (isolates the OOM path when serve fails)."""
    xseg, torch, info = setup(f"max_mapped:{cap_gib}GB,verbose:off")
    torch.ones(1, device="cuda")
    base = torch.cuda.memory_allocated()
    _, events, batches = serve_loop(torch, SERVE_EVENTS, (cap_gib + 2) * GiB, bare=True)
    gc.collect()
    after = torch.cuda.memory_allocated()
    info.update(oom_events=events, batches=batches, no_leak=after == base,
                ok=events >= SERVE_EVENTS and after == base)
    return info


def case_serve_ref(out):
    xseg, torch, info = setup("verbose:off")
    digests, events, batches = serve_loop(torch, SERVE_EVENTS, 1 << 20)  # "too large" fits
    json.dump(digests, open(os.path.join(out, "serve_ref_digests.json"), "w"))
    info.update(oom_events=events, batches=batches, ok=events == 0)
    return info


# ---- compile ----

def case_compile(out):
    xseg, torch, info = setup("verbose:off")
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).cuda().eval()
    x = torch.randn(8, 128, 256, device="cuda")
    with torch.no_grad():
        ref = block(x)
        fn = torch.compile(block, mode="reduce-overhead")
        outs = [fn(x).clone() for _ in range(4)]  # warm-up, record, replays
    diffs = [float((o - ref).abs().max()) for o in outs]
    info.update(max_abs_diff=max(diffs), replays=len(outs),
                ok=all(torch.allclose(o, ref, atol=1e-3, rtol=1e-3) for o in outs))
    return info


# ---- cudnn ----

def case_cudnn(out):
    xseg, torch, info = setup("verbose:off")
    import xseg._native  # noqa: F401,PLC0415
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2),
                        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(64, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    largest = 0
    try:
        from xseg import _native  # noqa: PLC0415
        largest = _native.load()._cache_info(0)
    except Exception:  # noqa: BLE001 (the figure only)
        pass
    info.update(first_loss=losses[0], last_loss=losses[-1], cache_info_largest=largest,
                ok=losses[-1] < losses[0] and all(map(lambda v: v == v, losses)))
    return info


# ---- snapshot ----

def case_snapshot(out):
    xseg, torch, info = setup("verbose:off")
    torch.cuda.memory._record_memory_history(max_entries=100000)
    keep = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (1, 3, 40, 200)]
    tmp = torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda")
    del tmp
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    import pickle  # noqa: PLC0415
    with open(os.path.join(out, "snapshot.pickle"), "wb") as f:
        pickle.dump(snap, f)
    from torch.cuda import _memory_viz as mv  # noqa: PLC0415
    segsum = mv.segsum(snap)
    html = mv.trace_plot(snap)
    seg_html = mv.segment_plot(snap)
    xs = json.loads(xseg.snapshot_json(0)) if isinstance(xseg.snapshot_json(0), str) \
        else xseg.snapshot_json(0)
    runs = {r[0] for s in xs["segments"] for r in s["mapped"]}
    addrs = {s["address"] for s in snap["segments"]}
    live = sum(b["size"] for s in snap["segments"] for b in s["blocks"]
               if b["state"] == "active_allocated")
    traces = sum(len(t) for t in snap["device_traces"])
    info.update(segments=len(snap["segments"]), xseg_runs=len(runs),
                runs_in_snapshot=len(runs & addrs), live_bytes=live, trace_entries=traces,
                segsum_chars=len(segsum), trace_plot_chars=len(html),
                segment_plot_chars=len(seg_html),
                ok=bool(runs) and runs <= addrs and live >= sum(k.numel() for k in keep)
                and traces > 0)
    del keep
    return info


# ---- stats ----

def case_stats(out):
    xseg, torch, info = setup("verbose:off")
    mem = torch.cuda.memory
    native_fns = all(getattr(f, "__module__", "") == "torch.cuda.memory"
                     for f in (torch.cuda.memory_stats, torch.cuda.memory_summary,
                               torch.cuda.reset_peak_memory_stats))
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    alloc = torch.cuda.memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    b = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    del b
    peak_before = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    peak_after = torch.cuda.max_memory_allocated()
    summary = torch.cuda.memory_summary()
    free, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(0.01)
    refused = False
    try:
        torch.empty(int(total * 0.02), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        refused = True
    torch.cuda.set_per_process_memory_fraction(1.0)
    before_empty = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    after_empty = torch.cuda.memory_reserved()
    stats = mem.memory_stats()
    info.update(native_functions=native_fns, allocated=alloc, max_reserved=reserved,
                peak_before_reset=peak_before, peak_after_reset=peak_after,
                summary_lines=summary.count("\n"), mem_get_info=[free, total],
                fraction_refused=refused, reserved_before_empty=before_empty,
                reserved_after_empty=after_empty, keys=len(stats),
                ok=native_fns and alloc >= 256 << 20 and reserved >= alloc
                and peak_before >= alloc + (512 << 20) and peak_after == alloc and refused
                and after_empty <= before_empty and total > 0)
    del a
    return info


IPC_CONF = "verbose:off,registrable_min:64MB,shareable:fd"


def ipc_child(q, r):
    """torch.multiprocessing child: xseg's native allocator first, then the
    parent's tensor (its storage opened through getIpcDevPtr)."""
    try:
        os.environ["XSEG_CONF"] = IPC_CONF
        import xseg  # noqa: PLC0415
        xseg.install(native=True)
        import torch  # noqa: PLC0415
        t = q.get(timeout=60)
        seen = float(t.double().sum().item())
        t.add_(1)  # the parent must see this
        torch.cuda.synchronize()
        r.put({"child_sum": seen, "child_ptr": t.data_ptr()})
        del t
        q.get(timeout=60)  # the parent is done: release our mapping after it reads
    except Exception as e:  # noqa: BLE001
        r.put({"child_error": repr(e), "traceback": traceback.format_exc()[-2000:]})


def ipc_step(msg):
    print(f"ipc: {msg}", file=sys.stderr, flush=True)


def case_ipc(out):
    xseg, torch, info = setup(IPC_CONF)
    import torch.multiprocessing as mp  # noqa: PLC0415
    small_error = ""
    try:  # an arena block: not exportable, with a clear message
        small = torch.ones(1024, device="cuda")
        ipc_step("sharing an arena tensor")
        small.untyped_storage()._share_cuda_()
    except Exception as e:  # noqa: BLE001
        small_error = str(e)[:300]
    ipc_step(f"arena tensor refused: {small_error[:120]!r}")
    ctx = mp.get_context("spawn")
    q, r = ctx.Queue(), ctx.Queue()
    n = 64 << 20 >> 2
    t = torch.arange(n, device="cuda", dtype=torch.float32).remainder_(1000)
    want = float(t.double().sum().item())
    p = ctx.Process(target=ipc_child, args=(q, r))
    p.start()
    q.put(t)
    ipc_step("sent")
    got = r.get(timeout=100)
    ipc_step(f"child said {got}")
    after = float(t.double().sum().item()) if "child_error" not in got else None
    q.put("done")
    p.join(30)
    ipc_step(f"child exit {p.exitcode}")
    info.update(got, sum_parent=want, sum_after_child_wrote=after, child_exit=p.exitcode,
                small_tensor_refused=small_error,
                ok="child_error" not in got and got.get("child_sum") == want
                and after == want + n and p.exitcode == 0 and "registrable_min" in small_error)
    return info


def child(name, out, cap):
    if not os.environ.get("XSEG_PROOF_NO_FAULTHANDLER"):
        faulthandler.enable()  # a native abort still names the Python line (stderr)
    t0 = time.time()
    try:
        fns = {"serve": lambda: case_serve(out, cap), "serve_ref": lambda: case_serve_ref(out),
               "serve_bare": lambda: case_serve_bare(out, cap),
               "compile": lambda: case_compile(out), "cudnn": lambda: case_cudnn(out),
               "snapshot": lambda: case_snapshot(out), "stats": lambda: case_stats(out),
               "ipc": lambda: case_ipc(out)}
        res = fns[name]()
    except Exception as e:  # noqa: BLE001 (the case fails, the run goes on)
        res = {"ok": False, "error": repr(e), "traceback": traceback.format_exc()[-4000:]}
    res.update(case=name, seconds=round(time.time() - t0, 2))
    print("RESULT " + json.dumps(res, default=str), flush=True)


def run_case(name, out, cap):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--out", out,
           "--cap-gib", str(cap)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINES[name],
                           check=False)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        res = json.loads(lines[-1][7:]) if lines else {
            "case": name, "ok": False, "error": f"exit {p.returncode}",
            "stderr": p.stderr[-4000:]}
    except subprocess.TimeoutExpired:
        res = {"case": name, "ok": False, "error": f"deadline {DEADLINES[name]} s passed"}
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        f.write(json.dumps(res, default=str) + "\n")
    return res


def compare_serve(out, res):
    try:
        a = json.load(open(os.path.join(out, "serve_digests.json")))
        b = json.load(open(os.path.join(out, "serve_ref_digests.json")))
    except OSError as e:
        res.update(ok=False, compare_error=repr(e))
        return
    served = [k for k, v in a.items() if v != "rejected"]
    same = sum(a[k] == b.get(k) for k in served)
    res.update(served=len(served), rejected=len(a) - len(served), identical_to_ref=same,
               ok=res.get("ok", False) and same == len(served) and len(served) > 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--cap-gib", type=int, default=8)
    ap.add_argument("--child")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.child:
        return child(a.child, a.out, a.cap_gib)
    results = []
    for name in a.cases.split(","):
        if name == "serve":
            ref = run_case("serve_ref", a.out, a.cap_gib)
            res = run_case("serve", a.out, a.cap_gib)
            compare_serve(a.out, res)
            results += [ref, res]
        else:
            results.append(run_case(name, a.out, a.cap_gib))
        print(json.dumps(results[-1], default=str)[:400], flush=True)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("# native_proof (issue 16)\n\n| case | ok | seconds | figures |\n|---|---|---:|---|\n")
        for r in results:
            figs = {k: v for k, v in r.items()
                    if k not in ("case", "ok", "seconds", "traceback", "stderr")}
            f.write(f"| {r['case']} | {'yes' if r.get('ok') else 'NO'} | {r.get('seconds', '')} "
                    f"| {json.dumps(figs, default=str)[:600]} |\n")
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
