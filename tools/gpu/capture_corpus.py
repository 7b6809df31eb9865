#!/usr/bin/env python3
"""capture_corpus.py: captures the workload corpus (tools/traces/corpus/) on
a CUDA machine: real PyTorch workloads built from Hugging Face configs with
random weights (nothing downloaded), every allocation and free that
PyTorch's caching allocator served written as an xseg-trace v1 file, and
what PyTorch itself reserved for the same workload, natively and with
expandable segments.

Each workload runs in its own subprocess per mode, same seed:
  native      records the allocator's history from before the model is
              built (torch.cuda.memory._record_memory_history, no stacks,
              a ring of 8 M entries checked for overflow) and writes
              OUT/<name>.csv.gz; also max_memory_reserved/allocated;
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, same
              workload, peaks only.
OUT/peers.json gets, per workload: events, peak live bytes (from the
trace), each mode's peak reserved and its ratio to peak live, seconds,
and any error (one workload failing does not stop the others).  The
file is rewritten after every subprocess.  Up to --jobs subprocesses
share the GPU (each workload peaks at 1-20 GB; the H200 has 140 GB).

usage: capture_corpus.py --out DIR [--set corpus|heldout] [--only NAME,...] [--jobs N]
       capture_corpus.py --list
Then: python3 tools/gpu/corpus_table.py DIR/peers.json --readme
tools/traces/corpus/README.md, and copy DIR/*.csv.gz and DIR/peers.json
into tools/traces/corpus/ (--set heldout: tools/traces/heldout/).
"""
import argparse
import concurrent.futures
import datetime
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus_tools  # noqa: E402 (its folder first)
import heldout_workloads  # noqa: E402 (its list only: torch is imported by the child)

# (name, what it is), in capture order; corpus_workloads.run_<name> runs it.
WORKLOADS = [
    ("serve_dynamic_kv", "Qwen2-1.5B-shaped decoder (1536 hidden, 28 layers, GQA 12/2, 152k vocab), "
     "bf16, SDPA: 10 greedy `generate()` calls with a growing (dynamic) KV cache, batch 1-32, "
     "left-padded prompts 48-2048, 16-48 new tokens"),
    ("serve_paged_kv", "TinyLlama-1.1B-shaped decoder (2048 hidden, 22 layers, GQA 32/4), bf16, "
     "hand-written vLLM-style serving: one preallocated KV pool per layer (8192 blocks of 16 "
     "tokens), per-request block tables, continuous batching of 48 requests (prompts 16-1536, "
     "16-160 new tokens, up to 32 running), prefill one request at a time"),
    ("embed_bert", "BERT-large-shaped encoder (1024 hidden, 24 layers), bf16, SDPA: 64 embedding "
     "batches, batch 1-256, length 8-512 with per-row padding, mean pooling, results copied "
     "to the host"),
    ("train_dense_adamw", "Llama-style decoder (1536 hidden, 16 layers, GQA 12/4, 32k vocab, "
     "0.5 B parameters) training 14 steps: fp32 weights, AdamW (foreach), bf16 autocast, "
     "gradient clipping, batch 1-16, sequence 256-4096"),
    ("train_moe_mixtral", "Mixtral-style MoE (1024 hidden, 8 layers, 8 experts top-2, eager "
     "expert loop, router aux loss) training 12 steps with AdamW under bf16 autocast, batch "
     "1-12, sequence 256-4096: the routing gives every expert a different token count"),
    ("train_vit_varres", "ViT-Base (768 hidden, 12 layers, patch 16) training 12 steps with "
     "AdamW under bf16 autocast at a different resolution each step (128-448 px, "
     "interpolated position embeddings), batch 16-128"),
    ("finetune_lora", "Llama-style decoder (2560 hidden, 20 layers, 1.5 B parameters) frozen "
     "in bf16 with hand-written LoRA adapters (r 16, alpha 32, dropout 0.05) on q/k/v/o, "
     "AdamW on the adapters only, bf16 autocast, 12 steps, batch 1-16, sequence 256-4096"),
    ("train_ckpt_qwen2", "Qwen2-style decoder (1536 hidden, 16 layers, GQA 12/2, 32k vocab) "
     "training 10 steps with activation checkpointing on every layer (torch.utils.checkpoint, "
     "non-reentrant, through gradient_checkpointing_enable), AdamW, bf16 autocast, "
     "12k-16k tokens per step"),
    ("prefill_long", "Llama-style decoder (2048 hidden, 16 layers, GQA 32/8), bf16, SDPA: "
     "long-context prefill of 8k-96k tokens (batch 1-4) into a dynamic KV cache, then 4-8 "
     "decode steps each"),
]
# The held-out set (--set heldout): workloads no default of xseg was chosen
# on, kept to check that the corpus was not overfitted (heldout_workloads.py).
SETS = {"corpus": WORKLOADS, "heldout": heldout_workloads.WORKLOADS}
SET_OF = {n: s for s, ws in SETS.items() for n, _ in ws}
NAMES = list(SET_OF)
DESCRIPTION = dict(w for ws in SETS.values() for w in ws)
# Each set's module of run_<name> functions, and how its traces name it.
MODULE = {"corpus": "corpus_workloads", "heldout": "heldout_workloads"}
LABEL = {"corpus": "corpus", "heldout": "held-out"}
MODES = ("native", "expandable")
MAX_ENTRIES = 8_000_000  # history ring; a full ring means dropped events: an error


# ------------------------------------------------------------- child side

def versions(torch):
    out = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name(0)}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001 (not every workload needs it)
        out["transformers"] = None
    return out


def start_recording(torch, res):
    """Allocator history on, no stack traces; free_completed skipped where
    this PyTorch can (fewer entries; the trace uses free_requested)."""
    kw = {"enabled": "all", "context": None, "stacks": "python", "max_entries": MAX_ENTRIES}
    try:
        torch.cuda.memory._record_memory_history(skip_actions=["free_completed"], **kw)
        res["skipped_actions"] = ["free_completed"]
    except Exception:  # noqa: BLE001 (older PyTorch: no skip_actions)
        torch.cuda.memory._record_memory_history(**kw)
        res["skipped_actions"] = []


def history_entries(torch):
    """This device's allocator history, then recording off."""
    snap = torch.cuda.memory._snapshot()
    traces = snap.get("device_traces") or []
    dev = torch.cuda.current_device()
    entries = traces[dev] if dev < len(traces) else []
    torch.cuda.memory._record_memory_history(enabled=None)
    return entries


def trace_comments(args, res, conv, nentries):
    s = conv.summary()
    return [
        "%s workload %s: %s" % (LABEL[SET_OF[args.child]], args.child,
                                DESCRIPTION[args.child]),
        "captured by tools/gpu/capture_corpus.py, seed %d; PyTorch %s (CUDA %s), transformers "
        "%s, %s" % (args.seed, res["torch"], res["cuda"], res["transformers"], res["gpu"]),
        "events %d (allocs %d, frees %d), live at end %d, peak live bytes %d, streams %d" % (
            s["events"], s["allocs"], s["frees"], s["live_at_end"], s["peak_live_bytes"],
            s["streams"]),
        "bytes: the size asked of PyTorch's caching allocator (history 'alloc' size = "
        "orig_size), not rounded; frees: '%s' (the caller's free)" % s["free_action"],
        "history: %d entries, ring of %d: nothing dropped; recording started before the "
        "model was built (frees of earlier blocks: %d)" % (nentries, MAX_ENTRIES,
                                                           s["unknown_frees"]),
        "PyTorch native on this run: peak reserved %d, peak allocated %d, peak requested %s" % (
            res["peak_reserved_bytes"], res["peak_allocated_bytes"],
            res.get("peak_requested_bytes")),
    ]


def save_trace(torch, args, res):
    entries = history_entries(torch)
    if not entries:
        raise RuntimeError("the allocator history is empty: recording did not start")
    if len(entries) >= MAX_ENTRIES:
        raise RuntimeError("history ring full (%d entries): events were dropped" % len(entries))
    conv = corpus_tools.convert(entries)
    n = len(entries)
    del entries
    path = os.path.join(args.out, args.child + ".csv.gz")
    corpus_tools.write_trace(path, trace_comments(args, res, conv, n), conv.lines)
    res["trace"] = dict(conv.summary(), history_entries=n, file=os.path.basename(path),
                        file_bytes=os.path.getsize(path))
    req = res.get("peak_requested_bytes")
    res["trace"]["peak_live_equals_requested_peak"] = (req == conv.peak_live
                                                       if req is not None else None)


def run_workload(torch, args, res):
    # CORPUS_WORKLOADS names another module of run_<name> functions (tests)
    module = importlib.import_module(os.environ.get("CORPUS_WORKLOADS", MODULE[SET_OF[args.child]]))
    fn = getattr(module, "run_" + args.child)
    t0 = time.perf_counter()
    info = fn(torch, args.seed) or {}
    torch.cuda.synchronize()
    res["seconds"] = round(time.perf_counter() - t0, 3)
    stats = torch.cuda.memory_stats()
    res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    res["peak_requested_bytes"] = stats.get("requested_bytes.all.peak")
    if args.mode == "expandable":  # (native: the snapshot would also copy the history)
        res["expandable_segments_seen"] = any(
            s.get("is_expandable", False) for s in torch.cuda.memory_snapshot())
    keep = info.pop("_keep", None)  # weights etc. stay live until the history is read
    res["info"] = info
    return keep


def child(args):
    res = {"name": args.child, "mode": args.mode, "seed": args.seed,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    rc = 1
    try:
        import torch
        torch.cuda.init()
        res.update(versions(torch))
        if args.mode == "native":
            start_recording(torch, res)
        keep = run_workload(torch, args, res)
        if args.mode == "native":
            save_trace(torch, args, res)
        del keep
        rc = 0
    except BaseException as e:  # noqa: BLE001 (everything goes into the report)
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["traceback"] = traceback.format_exc()[-6000:]
    with open(args.child_json, "w") as f:
        json.dump(res, f, default=str)  # (a workload fact that is not JSON: its text)
    return rc


# ------------------------------------------------------------ parent side

def mode_env(mode):
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        env.pop(k, None)
    if mode == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    return env


def run_child(args, name, mode, timeout):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "child.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--mode", mode,
               "--seed", str(args.seed), "--out", args.out, "--child-json", out]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=mode_env(mode), capture_output=True, text=True,
                               timeout=timeout)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout after %d s" % timeout, str(e.stderr or "")[-3000:]
        res = {"name": name, "mode": mode}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        res["subprocess_s"] = round(time.perf_counter() - t0, 1)
        if rc != 0:
            res.setdefault("error", "subprocess ended with %s" % rc)
            res["output_tail"] = tail
        return res


MEASURES = ("peak_reserved_bytes", "peak_allocated_bytes", "peak_requested_bytes", "seconds",
            "subprocess_s", "expandable_segments_seen", "error", "alloc_conf")


def merge(doc, res):
    """One child's result into the peers document."""
    w = next(x for x in doc["workloads"] if x["name"] == res["name"])
    w[res["mode"]] = {k: res.get(k) for k in MEASURES}
    for k in ("torch", "cuda", "transformers", "gpu"):
        if res.get(k):
            doc.setdefault(k, res[k])
    if res["mode"] == "native":
        w["info"] = res.get("info")
        w["traceback"] = res.get("traceback") or res.get("output_tail")
        if res.get("trace"):
            w.update(res["trace"])
            w.pop("error", None)
        else:
            w["error"] = res.get("error", "no trace")
    elif res.get("error"):
        w["expandable_traceback"] = res.get("traceback") or res.get("output_tail")
    for m in MODES:
        got = w.get(m) or {}
        w[m + "_ratio"] = corpus_tools.ratio(got.get("peak_reserved_bytes"),
                                             w.get("peak_live_bytes"))


def new_doc(args, names):
    return {"tool": "tools/gpu/capture_corpus.py", "seed": args.seed, "jobs": args.jobs,
            "max_entries": MAX_ENTRIES,
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "workloads": [{"name": n, "file": n + ".csv.gz", "description": DESCRIPTION[n],
                           "events": None, "error": "not run"} for n in names]}


def write_doc(args, doc, t_start):
    doc["elapsed_s"] = round(time.time() - t_start, 1)
    path = os.path.join(args.out, "peers.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)


def status_line(res):
    if res.get("error"):
        return "ERROR %s" % res["error"][:200]
    line = "peak reserved %.2f GB, %.1f s" % (res["peak_reserved_bytes"] / 1e9, res["seconds"])
    if res.get("trace"):
        t = res["trace"]
        line += ", %d events, peak live %.2f GB, %.1f MB file" % (
            t["events"], t["peak_live_bytes"] / 1e9, t["file_bytes"] / 1e6)
    return line


def parent(args, names):
    os.makedirs(args.out, exist_ok=True)
    t_start, lock = time.time(), threading.Lock()
    doc = new_doc(args, names)
    write_doc(args, doc, t_start)
    jobs = [(n, m) for m in MODES for n in names]  # every trace first

    def one(job):
        name, mode = job
        left = args.budget - (time.time() - t_start)
        if left < 20:
            res = {"name": name, "mode": mode, "error": "skipped: the %d s budget is spent"
                   % args.budget}
        else:
            print("[corpus] %s / %s: started" % (name, mode), flush=True)
            res = run_child(args, name, mode, int(min(args.timeout, left)))
        with lock:
            merge(doc, res)
            write_doc(args, doc, t_start)
            print("[corpus] %s / %s: %s (%.0f s)" % (name, mode, status_line(res),
                                                      res.get("subprocess_s", 0)), flush=True)
        return res

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, jobs))
    print()
    print(corpus_tools.render_table(doc))
    print("peers: %s" % os.path.join(args.out, "peers.json"))
    return 1 if any(r.get("error") for r in results) else 0


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", help="folder for the traces and peers.json")
    ap.add_argument("--only", help="comma-separated workload names, of either set "
                                   "(default: every workload of --set)")
    ap.add_argument("--set", choices=sorted(SETS), default="corpus",
                    help="corpus (tools/traces/corpus/, the default) or heldout "
                         "(tools/traces/heldout/: never tuned on)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--jobs", type=int, default=4, help="subprocesses at once (default 4)")
    ap.add_argument("--seed", type=int, default=1, help="seed of every workload (default 1)")
    ap.add_argument("--timeout", type=int, default=200, help="seconds per subprocess")
    ap.add_argument("--budget", type=int, default=330,
                    help="seconds for the whole run: later subprocesses are skipped and "
                         "running ones cut at it (default 330)")
    ap.add_argument("--child", choices=NAMES, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def select(only, which="corpus"):
    if not only:
        return [n for n, _ in SETS[which]]
    names = [n.strip() for n in only.split(",") if n.strip()]
    bad = [n for n in names if n not in NAMES]
    if bad:
        raise SystemExit("capture_corpus.py: unknown workload(s) %s; --list names them"
                         % ", ".join(bad))
    return names


def main(argv=None):
    args = parse(argv)
    if args.list:
        for which, ws in SETS.items():
            for n, d in ws:
                print("%-22s %-8s %s" % (n, which, d))
        return 0
    if args.child:
        return child(args)
    if not args.out:
        raise SystemExit("capture_corpus.py: --out DIR is required (see --help)")
    args.out = os.path.abspath(args.out)
    return parent(args, select(args.only, args.set))


if __name__ == "__main__":
    sys.exit(main())
