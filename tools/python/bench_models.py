#!/usr/bin/env python3
"""bench_models.py: real Hugging Face models under three allocators.

Workloads (random weights from configs, nothing downloaded):
  llama  a Llama-3.2-1B-shaped decoder in bf16 serving greedy generate()
         calls with batch 1-16, prompts 16-1024, 16-32 new tokens;
  gpt2   a GPT-2-medium-shaped model training with AdamW under bf16
         autocast, batch and sequence length varying every step;
  graph  a transformer layer captured with torch.cuda.graph and replayed
         (CUDA graphs work, the graph's memory stays its own);
  probe  (only when named) pieces of the llama model timed alone: GPU reads of
         the weights, a prefill, a generate(), torch.empty + del.
Modes: native (PyTorch's caching allocator), expandable
(expandable_segments:True) and xseg (xseg.install()).  --variant CONF adds a
mode "xseg[CONF]": xseg with that conf, run in the same rotation as the
others (so that a machine's drift over the run hits every mode alike).

Each workload x mode runs in a fresh subprocess with the same seed and a
timeout.  Reported: peak device memory taken (cudaMemGetInfo drop from
before the model to the peak; with the allocator's reserved peak so that
memory mapped and unmapped between two polls is counted), peak reserved,
peak allocated, throughput (for each call or step its fastest run over the
passes after the first, against the machine's noise; --rounds N repeats every
mode N times in rotating order, the table shows medians), and a hash of the
outputs (generated tokens, losses, graph outputs) that must be equal across
modes.  --trace-dir records xseg's allocations as an xseg-trace v1 file.  Errors are caught
and reported; the JSON is rewritten after every run.

    PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
        python3 tools/python/bench_models.py --out pytorch.json
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

MODES = ("native", "expandable", "xseg")
WORKLOADS = ("llama", "gpt2", "graph", "probe")
GiB = float(1 << 30)

# (batch, prompt length, new tokens)
LLAMA_CALLS = ((1, 16, 32), (4, 128, 32), (16, 64, 16), (8, 1024, 16), (2, 512, 32),
               (16, 256, 24), (1, 1024, 32), (12, 384, 16), (4, 768, 24), (16, 1024, 16),
               (6, 32, 32), (10, 640, 20))
# (batch, sequence length)
GPT2_STEPS = ((8, 512), (4, 1024), (16, 256), (2, 1024), (12, 384), (6, 768), (16, 512),
              (3, 896), (10, 640), (8, 1024))


# ---------------------------------------------------------------- child side

class Meter:
    """Peak device memory: cudaMemGetInfo drop since the baseline, and the
    memory outside the allocator plus the allocator's reserved peak."""

    def __init__(self, torch, stats):
        self.torch, self.stats = torch, stats
        torch.cuda.synchronize()
        self.base_free = torch.cuda.mem_get_info()[0]
        self.peak_drop = 0
        self.peak_device = 0

    def poll(self):
        self.torch.cuda.synchronize()
        drop = self.base_free - self.torch.cuda.mem_get_info()[0]
        st = self.stats()
        outside = drop - st.get("reserved_bytes.all.current", 0)
        self.peak_drop = max(self.peak_drop, drop)
        self.peak_device = max(self.peak_device, drop,
                               outside + st.get("reserved_bytes.all.peak", 0))

    def result(self):
        st = self.stats()
        return {"peak_device_bytes": self.peak_device, "peak_drop_polled_bytes": self.peak_drop,
                "peak_reserved_bytes": st.get("reserved_bytes.all.peak", 0),
                "peak_allocated_bytes": st.get("allocated_bytes.all.peak", 0),
                "peak_requested_bytes": st.get("requested_bytes.all.peak", 0),
                "final_reserved_bytes": st.get("reserved_bytes.all.current", 0),
                "xseg_stats": {k: v for k, v in st.items() if k.startswith("xseg.")}}


HISTORY = 1000000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def portable(path):
    """A path as the results record it: relative to the source tree inside
    it, the bare file name outside (no machine's folders in the JSON)."""
    if not os.path.isabs(path):
        return path
    inside = os.path.commonpath([ROOT, path]) == ROOT
    return os.path.relpath(path, ROOT) if inside else os.path.basename(path)


def setup_mode(mode, xseg_conf, trace=False):
    """Allocator switch before torch touches CUDA, then deterministic
    settings and CUDA init; returns (torch, stats function, info)."""
    import torch
    info = {"torch": torch.__version__}
    if mode == "xseg":
        import xseg
        if trace:
            base = xseg_conf if xseg_conf is not None else os.environ.get("XSEG_CONF", "")
            xseg_conf = (base + "," if base else "") + f"history:{HISTORY}"
        xseg.install(xseg_conf)
        info.update(xseg_library=portable(xseg.library_path()), xseg_hooks=list(xseg.hooks()),
                    xseg_conf=os.environ.get("XSEG_CONF", ""))
        stats = xseg.memory_stats
        global _counters
        _counters = stats
    else:
        def stats():
            return torch.cuda.memory_stats()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.cuda.init()
    info["gpu"] = torch.cuda.get_device_name(0)
    return torch, stats, info


def make_config(cls, attn, **kw):
    try:
        return cls(attn_implementation=attn, **kw)
    except TypeError:
        config = cls(**kw)
        config._attn_implementation = attn
        return config


def build(torch, cls, config, dtype, seed):
    """The model with random weights, made on the GPU in `dtype`."""
    torch.manual_seed(seed)
    model = None
    with torch.device("cuda"):
        for kw in ("dtype", "torch_dtype"):
            try:
                model = cls._from_config(config, **{kw: dtype})
                break
            except TypeError:
                continue
        if model is None:
            model = cls(config)
    if next(model.parameters()).dtype != dtype:
        model = model.to(dtype)
    return model


# xseg mode: the allocator counters recorded per call (see timed).
CALL_COUNTERS = ("xseg.moved_bytes", "xseg.syncs", "xseg.driver_calls.map",
                 "xseg.driver_calls.create", "xseg.driver_calls.unmap")
_counters = None  # set by setup_mode in xseg mode: () -> stats dict


def counter_values():
    if _counters is None:
        return None
    st = _counters()
    return [st.get(k, 0) for k in CALL_COUNTERS]


def timed(torch, fn, calls=None):
    """fn() between two synchronisations: (its result, wall seconds).  With
    `calls`, appends [wall seconds, CPU seconds of this process], and in
    xseg mode a third item: what the call added to xseg's counters
    (moved_bytes, syncs, map, create, unmap), read outside the timing."""
    before = counter_values() if calls is not None else None
    torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if calls is not None:
        entry = [round(dt, 6), round(time.process_time() - c0, 6)]
        if before is not None:
            after = counter_values()
            entry.append({k.split(".")[-1]: a - b for k, a, b in zip(CALL_COUNTERS, after, before)})
        calls.append(entry)
    return out, dt


def llama_config(transformers):
    """Llama-3.2-1B shapes: 1.24 B parameters."""
    return make_config(
        transformers.LlamaConfig, "eager", vocab_size=128256, hidden_size=2048,
        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)


def llama_pass(torch, model, meter, seed, digest, calls=None):
    """One pass over LLAMA_CALLS: (generated tokens, seconds)."""
    tokens, seconds = 0, 0.0
    for i, (b, plen, new) in enumerate(LLAMA_CALLS):
        g = torch.Generator().manual_seed(seed + i)
        ids = torch.randint(3, 128256, (b, plen), generator=g).cuda()
        mask = torch.ones_like(ids)
        out, dt = timed(torch, lambda: model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
            min_new_tokens=new, pad_token_id=0), calls)
        digest.update(out[:, plen:].cpu().numpy().tobytes())
        tokens += b * new
        seconds += dt
        del out, ids, mask
        meter.poll()
    return tokens, seconds


def best_of_calls(calls, work):
    """Throughput from the fastest run of each call over the measured passes
    (all but the first, the warm-up, when there are several): the same
    calls, with the machine's noise (other tenants, CPU clocks) mostly
    filtered out.  work[i] is the tokens of call i."""
    measured = calls[1:] if len(calls) > 1 else calls
    best = [min(p[i][0] for p in measured) for i in range(len(work))]
    return sum(work) / sum(best)


def run_llama(torch, stats, seed, passes):
    import transformers
    meter = Meter(torch, stats)
    model = build(torch, transformers.LlamaForCausalLM, llama_config(transformers),
                  torch.bfloat16, seed).eval()
    meter.poll()
    digests, rates, calls = [], [], []
    with torch.no_grad():
        for p in range(passes):
            d = hashlib.sha256()
            calls.append([])
            tokens, secs = llama_pass(torch, model, meter, seed, d, calls[-1])
            digests.append(d.hexdigest())
            if p > 0 or passes == 1:
                rates.append(tokens / secs)
    out = meter.result()
    work = [b * new for b, _, new in LLAMA_CALLS]
    out.update(throughput=best_of_calls(calls, work), throughput_unit="generated tokens/s",
               throughput_best_pass=max(rates), throughput_all=rates, output_hash=digests[0],
               outputs_stable_across_passes=len(set(digests)) == 1, call_times=calls,
               params=sum(p.numel() for p in model.parameters()))
    return out


def gpt2_config(transformers):
    """GPT-2 medium shapes: 355 M parameters (eager attention: deterministic
    backward)."""
    return make_config(
        transformers.GPT2Config, "eager", vocab_size=50257, n_positions=1024, n_embd=1024,
        n_layer=24, n_head=16, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        use_cache=False)


def gpt2_round(torch, model, opt, meter, seed, losses, calls=None):
    steps_tokens, seconds = 0, 0.0
    for i, (b, s) in enumerate(GPT2_STEPS):
        g = torch.Generator().manual_seed(seed + i)
        ids = torch.randint(0, 50257, (b, s), generator=g).cuda()

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

        loss, dt = timed(torch, step, calls)
        losses.append(loss)
        steps_tokens += b * s
        seconds += dt
        del ids
        meter.poll()
    return steps_tokens, seconds


def run_gpt2(torch, stats, seed, passes):
    import transformers
    meter = Meter(torch, stats)
    model = build(torch, transformers.GPT2LMHeadModel, gpt2_config(transformers),
                  torch.float32, seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    meter.poll()
    losses, rates, steps_rates, calls = [], [], [], []
    for p in range(passes):
        calls.append([])
        tokens, secs = gpt2_round(torch, model, opt, meter, seed, losses, calls[-1])
        if p > 0 or passes == 1:
            rates.append(tokens / secs)
            steps_rates.append(len(GPT2_STEPS) / secs)
    out = meter.result()
    work = [b * q for b, q in GPT2_STEPS]
    out.update(throughput=best_of_calls(calls, work), throughput_unit="training tokens/s",
               throughput_best_pass=max(rates),
               steps_per_s=max(steps_rates), throughput_all=rates, losses=losses,
               call_times=calls,
               output_hash=hashlib.sha256(repr(losses).encode()).hexdigest(),
               params=sum(p.numel() for p in model.parameters()))
    return out


def make_block(torch, d=1024, heads=16, ff=4096):
    """A pre-norm transformer block of plain ops (all capturable)."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    return Block()


def run_graph(torch, stats, seed, passes):
    meter = Meter(torch, stats)
    torch.manual_seed(seed)
    layer = make_block(torch).to("cuda", torch.bfloat16).eval()
    static = torch.randn(8, 256, 1024, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            layer(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = layer(static)
    junk = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(32)]
    meter.poll()
    digest, worst, replays, secs = hashlib.sha256(), 0.0, 0, 0.0
    with torch.no_grad():
        for i in range(20 * passes):
            g = torch.Generator().manual_seed(seed + i)
            x = torch.randn(8, 256, 1024, generator=g).to("cuda", torch.bfloat16)
            static.copy_(x)
            _, dt = timed(torch, graph.replay)
            ref = layer(x)
            worst = max(worst, float((static_out.float() - ref.float()).abs().max()))
            digest.update(static_out.cpu().view(torch.int16).numpy().tobytes())
            replays, secs = replays + 1, secs + dt
    intact = all(bool((j == 7.0).all()) for j in junk)
    meter.poll()
    out = meter.result()
    out.update(throughput=replays / secs, throughput_unit="graph replays/s",
               output_hash=digest.hexdigest(), max_abs_diff_vs_eager=worst,
               eager_memory_intact=intact, graph_ok=intact and worst < 0.05)
    return out


def event_ms(torch, fn, reps):
    """Median milliseconds of fn() over reps runs, timed with CUDA events
    (after one warm-up run)."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def alloc_pairs_ns(torch, nbytes, n=20000):
    """Nanoseconds per torch.empty + del of nbytes, from Python (warm)."""
    for _ in range(100):
        torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e9


def run_probe(torch, stats, seed, passes):
    """Where time goes on the llama model, piece by piece: GPU reads of the
    weights (are xseg's mappings slower for kernels?), a GPU-bound prefill, a
    CPU-bound generate(), and the Python-level allocation cost."""
    import transformers
    meter = Meter(torch, stats)
    model = build(torch, transformers.LlamaForCausalLM, llama_config(transformers),
                  torch.bfloat16, seed).eval()
    params = list(model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in params)
    out = {"weight_bytes": nbytes}
    with torch.no_grad():
        ms = event_ms(torch, lambda: torch._foreach_norm(params), 20)
        out["weights_read_ms"] = ms
        out["weights_read_GBps"] = nbytes / ms / 1e6
        big = torch.cat([p.reshape(-1) for p in params[:64]])
        ms = event_ms(torch, lambda: big.float().sum(), 20)
        out["contiguous_read_ms"], out["contiguous_read_GBps"] = ms, big.numel() * 2 / ms / 1e6
        del big
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(3, 128256, (8, 1024), generator=g).cuda()
        out["prefill_8x1024_ms"] = event_ms(torch, lambda: model(input_ids=ids, use_cache=False),
                                            5)
        small = ids[:4, :64].contiguous()
        gen = []
        for _ in range(4):
            _, dt = timed(torch, lambda: model.generate(
                input_ids=small, attention_mask=torch.ones_like(small), do_sample=False,
                max_new_tokens=32, min_new_tokens=32, pad_token_id=0))
            gen.append(dt)
        gen.sort()
        out["generate_4x64x32_ms"] = 1000 * gen[len(gen) // 2]
        del ids, small
    meter.poll()
    for size in (4096, 1 << 20, 64 << 20):
        out[f"empty_del_{size}_ns"] = alloc_pairs_ns(torch, size)
    meter.poll()
    out.update(meter.result())
    out.update(throughput=1000.0 / out["generate_4x64x32_ms"], throughput_unit="generate/s",
               output_hash="n/a")
    return out


RUNNERS = {"llama": run_llama, "gpt2": run_gpt2, "graph": run_graph, "probe": run_probe}


def write_trace(path, history):
    """The alloc and free events of an xseg history as an xseg-trace v1 file
    (gzip); frees of blocks allocated before the ring's oldest event are
    left out.  Returns what the live run saw at its peak of mapped memory."""
    import gzip
    ids, streams, next_id = {}, {}, 0
    peak = {"mapped": 0}
    with gzip.open(path, "wt") as f:
        f.write(f"# xseg-trace v1: recorded by bench_models.py through xseg's history "
                f"(dropped {history['dropped']} events)\n")
        for e in history["events"]:
            if e["mapped"] > peak["mapped"]:
                peak = {"mapped": e["mapped"], "live": e["live"], "seq": e["seq"]}
            if e["kind"] == "alloc":
                sid = streams.setdefault(e["stream"], len(streams))
                ids[e["addr"]] = next_id
                f.write(f"a,{next_id},{e['size']},{sid}\n")
                next_id += 1
            elif e["kind"] == "free" and e["addr"] in ids:
                f.write(f"f,{ids.pop(e['addr'])}\n")
    return {"trace": portable(path), "events": len(history["events"]),
            "dropped": history["dropped"], "peak_mapped_event": peak}


def child(args):
    result = {"workload": args.workload, "mode": args.mode, "seed": args.seed}
    trace = bool(args.trace_dir) and args.mode == "xseg"
    try:
        torch, stats, info = setup_mode(args.mode, args.xseg_conf, trace)
        result.update(info)
        t0 = time.perf_counter()
        result.update(RUNNERS[args.workload](torch, stats, args.seed, args.passes))
        result["wall_s"] = time.perf_counter() - t0
        if trace:
            import xseg
            os.makedirs(args.trace_dir, exist_ok=True)
            result["recorded"] = write_trace(
                os.path.join(args.trace_dir, f"{args.workload}_live.csv.gz"),
                json.loads(xseg.history_json(0)))
        if args.mode != "xseg":
            result["expandable_segments_seen"] = any(
                seg.get("is_expandable", False) for seg in torch.cuda.memory_snapshot())
        rc = 0
    except BaseException as e:  # noqa: BLE001 (everything goes to the report)
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
        rc = 1
    with open(args.child_out, "w") as f:
        json.dump(result, f)
    return rc


# --------------------------------------------------------------- parent side

def mode_env(mode):
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        env.pop(k, None)
    if mode == "expandable":
        env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def variant_name(conf):
    return f"xseg[{conf}]"


def split_mode(mode, xseg_conf):
    """(the child's mode, its xseg conf) for a mode or a variant name."""
    if mode.startswith("xseg[") and mode.endswith("]"):
        return "xseg", mode[5:-1]
    return mode, xseg_conf


def run_one(args, workload, mode, timeout):
    child_mode, conf = split_mode(mode, args.xseg_conf)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--workload", workload,
               "--mode", child_mode, "--seed", str(args.seed), "--passes", str(args.passes),
               "--child-out", out]
        if conf:
            cmd += ["--xseg-conf", conf]
        if args.trace_dir:
            cmd += ["--trace-dir", os.path.abspath(args.trace_dir)]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=mode_env(child_mode), capture_output=True, text=True,
                               timeout=timeout)
            rc, stderr = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = "timeout"
            stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (
                e.stderr or "")
        res = {"workload": workload, "mode": mode}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        res["mode"] = mode
        if conf and child_mode == "xseg":
            res["xseg_conf"] = conf
        res["returncode"] = rc
        res["subprocess_s"] = time.perf_counter() - t0
        if rc != 0 and "error" not in res:
            res["error"] = f"subprocess ended with {rc}"
        if rc != 0:
            res["stderr_tail"] = stderr[-4000:]
        return res


def compare(results):
    """Per workload: outputs equal across modes, and the issue's figures."""
    verdict = {}
    for w in WORKLOADS:
        rows = {m: r for (wl, m), r in results.items() if wl == w and "error" not in r}
        if not rows:
            continue
        hashes = {m: r.get("output_hash") for m, r in rows.items()}
        same = len(set(hashes.values())) == 1
        complete = all(m in rows for m in MODES)
        v = {"outputs_identical": same if complete else (False if not same else None),
             "hashes": hashes}
        if w == "probe":  # measurements only: no outputs to compare
            v["outputs_identical"] = None
        if w == "graph":
            v["graph_ok"] = {m: r.get("graph_ok") for m, r in rows.items()}
        if "xseg" in rows and "expandable" in rows:
            v["xseg_peak_below_expandable"] = (rows["xseg"]["peak_device_bytes"]
                                               < rows["expandable"]["peak_device_bytes"])
        if "xseg" in rows and "native" in rows:
            ratio = rows["xseg"]["throughput"] / rows["native"]["throughput"]
            v["xseg_throughput_vs_native"] = ratio
            v["xseg_throughput_within_2pct"] = ratio >= 0.98
        variants = {}
        for m, r in rows.items():
            if m in MODES:
                continue
            variants[m] = {}
            if "expandable" in rows:
                variants[m]["peak_below_expandable"] = (r["peak_device_bytes"]
                                                        < rows["expandable"]["peak_device_bytes"])
            if "native" in rows:
                variants[m]["throughput_vs_native"] = (r["throughput"]
                                                       / rows["native"]["throughput"])
        if variants:
            v["variants"] = variants
        verdict[w] = v
    return verdict


def fmt_gib(n):
    return f"{n / GiB:8.3f}"


def rows(results, w):
    """(mode, result, percent against native or None) of workload w."""
    native = results.get((w, "native"), {})
    variants = sorted(m for (wl, m) in results if wl == w and m not in MODES)
    for m in list(MODES) + variants:
        r = results.get((w, m))
        if r is None:
            continue
        rel = (100 * (r["throughput"] / native["throughput"] - 1)
               if "throughput" in native and "error" not in r else None)
        yield m, r, rel


def table(results, verdict):
    mw = max([10] + [len(m) for (_, m) in results])  # variant names are longer
    head = (f"{'workload':8s} {'mode':{mw}s} {'peak dev GiB':>12s} {'polled GiB':>10s} "
            f"{'reserved':>9s} {'allocated':>9s} {'throughput':>12s} {'vs native':>9s}  output")
    lines = [head, "-" * len(head)]
    for w in WORKLOADS:
        for m, r, pct in rows(results, w):
            if "error" in r:
                lines.append(f"{w:8s} {m:{mw}s} ERROR: {r['error'][:90]}")
                continue
            rel = f"{pct:+8.2f}%" if pct is not None else f"{'-':>9s}"
            lines.append(f"{w:8s} {m:{mw}s} {fmt_gib(r['peak_device_bytes']):>12s} "
                         f"{fmt_gib(r['peak_drop_polled_bytes']):>10s} "
                         f"{fmt_gib(r['peak_reserved_bytes']):>9s} "
                         f"{fmt_gib(r['peak_allocated_bytes']):>9s} "
                         f"{r['throughput']:12.1f} {rel}  {r['output_hash'][:12]}")
        if w in verdict:
            v = verdict[w]
            lines.append(f"{'':8s} outputs identical: {v['outputs_identical']}; "
                         f"xseg peak < expandable: {v.get('xseg_peak_below_expandable')}; "
                         f"xseg throughput within 2%: {v.get('xseg_throughput_within_2pct')}")
    units = {w: next((r["throughput_unit"] for (wl, _), r in results.items()
                      if wl == w and "throughput_unit" in r), "") for w in WORKLOADS}
    lines.append("throughput: " + "; ".join(f"{w} in {u}" for w, u in units.items() if u))
    return "\n".join(lines)


OUTPUT_WORD = {True: "identical", False: "DIFFER", None: "incomplete"}


def markdown(results, verdict):
    """The results as a Markdown table (for docs/pytorch.md)."""
    lines = ["| workload | allocator | peak device memory (GiB) | peak reserved (GiB) | "
             "peak allocated (GiB) | throughput | vs native | outputs |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for w in WORKLOADS:
        same = verdict.get(w, {}).get("outputs_identical")
        for m, r, pct in rows(results, w):
            if "error" in r:
                lines.append(f"| {w} | {m} | error: {r['error'][:60]} | | | | | |")
                continue
            rel = f"{pct:+.2f}%" if pct is not None else ""
            lines.append(
                f"| {w} | {m} | {r['peak_device_bytes'] / GiB:.3f} | "
                f"{r['peak_reserved_bytes'] / GiB:.3f} | {r['peak_allocated_bytes'] / GiB:.3f} | "
                f"{r['throughput']:.1f} {r['throughput_unit']} | {rel} | "
                f"{OUTPUT_WORD[same]} ({r['output_hash'][:10]}) |")
    return "\n".join(lines)


def write(path, args, results, verdict, started):
    doc = {"command": " ".join([os.path.basename(sys.executable)]
                               + [portable(a) for a in sys.argv]),
           "seed": args.seed, "passes": args.passes, "rounds": args.rounds,
           "xseg_conf": args.xseg_conf,
           "started": started, "elapsed_s": time.time() - started,
           "results": [results[k] for k in sorted(results)], "verdict": verdict,
           "markdown": markdown(results, verdict)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def aggregate(runs):
    """One row from the rounds of a (workload, mode): the median
    throughput and peak, with every round's values kept."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    def median(key):
        return statistics.median(r[key] for r in ok)
    row = dict(ok[0])
    if len(runs) > 1:
        row["throughput_rounds"] = [r["throughput"] for r in ok]
        row["peak_device_rounds"] = [r["peak_device_bytes"] for r in ok]
        row["throughput"] = median("throughput")
        row["peak_device_bytes"] = median("peak_device_bytes")
        row["rounds"] = len(ok)
        hashes = {r.get("output_hash") for r in ok}
        if len(hashes) > 1:
            row["output_hash"] = "differs between rounds"
    return row


def parent(args):
    started = time.time()
    runs, results, verdict = {}, {}, {}
    modes = list(args.modes) + [variant_name(c) for c in args.variant]
    for rnd in range(args.rounds):
        for w in args.workloads:
            k = rnd % len(modes)  # rotate the order: no mode always runs first
            for m in modes[k:] + modes[:k]:
                left = args.budget - (time.time() - started)
                if left < 30:
                    if (w, m) not in runs:
                        runs[(w, m)] = [{"workload": w, "mode": m, "subprocess_s": 0.0,
                                         "error": f"skipped: the {args.budget} s budget is "
                                                  "spent"}]
                    continue
                print(f"[bench] round {rnd + 1}: {w} / {m} ...", flush=True)
                r = run_one(args, w, m, min(args.timeout, left))
                runs.setdefault((w, m), []).append(r)
                status = r.get("error") or (f"peak {fmt_gib(r['peak_device_bytes']).strip()} "
                                            f"GiB, {r['throughput']:.1f} {r['throughput_unit']}")
                print(f"[bench] round {rnd + 1}: {w} / {m}: {status} "
                      f"({r['subprocess_s']:.0f} s)", flush=True)
                results = {key: aggregate(v) for key, v in runs.items()}
                verdict = compare(results)
                if args.out:
                    write(args.out, args, results, verdict, started)
    print()
    print(table(results, verdict))
    print()
    print(markdown(results, verdict))
    failed = [k for k, r in results.items() if "error" in r]
    return 1 if failed else 0


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS[:3]), choices=WORKLOADS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--passes", type=int, default=3,
                    help="passes over each schedule; the first warms up; the throughput "
                         "counts the fastest run of each call (step) in the later ones")
    ap.add_argument("--rounds", type=int, default=1,
                    help="fresh processes per workload and mode, in rotating order; the "
                         "table shows the median")
    ap.add_argument("--trace-dir", default=None,
                    help="xseg mode: record every allocation (conf history) and write it "
                         "there as an xseg-trace v1 file, for xseg-replay")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per subprocess")
    ap.add_argument("--budget", type=int, default=540,
                    help="seconds for the whole run; later runs are skipped past it")
    ap.add_argument("--xseg-conf", default=None, help="conf for xseg.install()")
    ap.add_argument("--variant", action="append", default=[], metavar="CONF",
                    help="also run xseg with this conf, as the mode xseg[CONF] in the same "
                         "rotation (repeatable)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
