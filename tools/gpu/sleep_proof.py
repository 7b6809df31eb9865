#!/usr/bin/env python3
"""sleep_proof.py: issue 14's proof on one GPU: Hugging Face decoders sleep
and wake under xseg, and serve the same tokens after every wake.

For each model (random weights from configs built here, nothing
downloaded; bf16; transformers 5.x; one fresh process per model):
  qwen2-1.5b  Qwen2-1.5B shapes (1.54 B parameters, 3.1 GB)
  llama3-8b   Llama-3-8B shapes (8.03 B parameters, 16.06 GB)
the child process
  1. installs xseg as PyTorch's allocator (xseg.install(), before any CUDA
     allocation), warms up cuBLAS on the streams it uses and runs a
     one-layer copy of the model once (lazily made workspaces land in the
     default tag), then reads the free device memory: "free_before_load";
  2. builds the model under xseg.tag("weights"), allocates a persistent KV
     pool (--kv-gib) under "kv" and runs generate() (greedy, fixed-seed
     prompts, --new-tokens) under "kv": the reference tokens; generate runs
     twice, to show the model is deterministic without any sleep;
  3. captures a CUDA graph of the model's forward on a static [1, S] input
     (use_cache=False; if capture of the whole forward fails, of the last
     layer's MLP + final norm + lm_head, recorded as graph.kind) and
     records its output;
  4. cycles --cycles times: sleep(weights: backup, kv: discard, graphs:
     backup); free memory read; an allocation under the sleeping tag
     "weights" must be refused (cycle 0); a trainer-like phase under tag
     "train" (ballast filled and checked, bf16 matmuls; every
     --scribble-every cycles the ballast takes all free memory but 8 GiB,
     so that the physical memory sleep gave back is overwritten), freed,
     xseg.empty_cache(); wake_up; generate again -> tokens must equal the
     reference; graph.replay() -> output must equal the recorded one;
     per-parameter checksums (int64 sums of the bits) must equal the
     reference; the KV pool must be writable again.
Per cycle: sleep s, wake s, free bytes before load / after load / before
sleep / after sleep / after the trainer / after wake, every equality, tag
stats.  The JSON (--out) is rewritten after every cycle.

Targets (reported, not part of the exit status): free memory after sleep
within 1% of the free memory before load (issue: "device memory after
sleep within 1% of what the process held before the model was loaded");
stable sleep and wake times.  Checks (exit status): token, graph and
weight equality every cycle, the refused allocation, trainer and KV pool
usable, the weights in their tag, no leak (free memory after sleep and
after wake stable within --leak-tol-mib over the cycles).

usage:
  PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
      python3 tools/gpu/sleep_proof.py --quick --out quick.json
  ... python3 tools/gpu/sleep_proof.py --cycles 20 --deadline 400 --out full.json
--quick: qwen2-1.5b only, 3 cycles (unless --cycles / --models say).
Exit: 0 every check passed and every cycle ran; 1 a check failed; 2 an
error (exception, crash, timeout of a child, missing API); 3 the deadline
cut cycles or models short (everything that ran passed).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(ROOT, "tools", "python")
GiB = 1 << 30
MiB = 1 << 20

SLEEP_MODES = {"weights": "backup", "kv": "discard", "graphs": "backup"}
WATCHED_TAGS = ("default", "weights", "kv", "train")
NEEDED = ("install", "tag", "sleep", "wake_up", "tag_stats", "empty_cache", "memory_stats",
          "graph_pools", "last_error", "has_graph_hooks")

# name: transformers config class, model class, config keywords, KV pool GiB
MODELS = {
    "qwen2-1.5b": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=True, use_sliding_window=False, bos_token_id=1, eos_token_id=2,
        pad_token_id=0), 2.0),
    "llama3-8b": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0), 8.0),
}
EXIT_OK, EXIT_CHECK, EXIT_ERROR, EXIT_INCOMPLETE = 0, 1, 2, 3
T0 = float(os.environ.get("SLEEP_PROOF_T0") or time.time())  # the parent's start


def say(msg):
    who = "sleep_proof" + (f" {sys.argv[sys.argv.index('--child') + 1]}"
                           if "--child" in sys.argv[:-1] else "")
    print(f"{who} [{time.time() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def write_json(path, obj):
    """Atomically (a half-written file never replaces a good one)."""
    if not path:
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


# ======================================================= pure helpers (tested
# without torch: summaries and verdicts of the cycle records)

def spread(values):
    """{median, min, max, n} of a list of numbers (None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def within(values, tol):
    vals = [v for v in values if v is not None]
    return bool(vals) and max(vals) - min(vals) <= tol


def summarize(res, leak_tol):
    """Checks and targets of a child result from its cycles (pure)."""
    cycles = res.get("cycles", [])
    setup = res.get("setup", {})
    checks = {}  # True passed, False failed, None not reached
    ran = bool(cycles)
    for key in ("tokens_equal", "graph_equal", "weights_equal", "trainer_ok", "kv_pool_ok",
                "sleep_ok", "wake_ok"):
        checks[key] = all(c.get(key) is True for c in cycles) if ran else None
    checks["sleeping_tag_alloc_refused"] = \
        bool(cycles[0].get("refused", {}).get("refused")) if ran else None
    for key, val in (("weights_in_tag", setup.get("weights_in_tag")),
                     ("graph_replay_deterministic",
                      setup.get("graph", {}).get("deterministic"))):
        checks[key] = None if val is None else val is True
    after_sleep = [c.get("free_after_sleep") for c in cycles]
    after_wake = [c.get("free_after_wake") for c in cycles]
    checks["no_leak"] = (within(after_sleep, leak_tol) and within(after_wake, leak_tol)) \
        if ran else None
    base = setup.get("free_before_load")
    pct = [100.0 * (base - f) / base for f in after_sleep if base and f is not None]
    warm = cycles[1:] if len(cycles) > 1 else cycles
    targets = {
        "after_sleep_within_1pct_of_before_load": bool(pct) and max(pct) <= 1.0,
        "after_sleep_shortfall_pct_of_free_before_load": spread(pct),
        "after_sleep_shortfall_bytes": spread([base - f for f in after_sleep
                                               if base and f is not None]),
        "sleep_s_warm": spread([c.get("sleep_s") for c in warm]),
        "wake_s_warm": spread([c.get("wake_s") for c in warm]),
        "sleep_s_cycle0": cycles[0].get("sleep_s") if cycles else None,
        "wake_s_cycle0": cycles[0].get("wake_s") if cycles else None,
        "backup_gbs_sleep_warm": spread([c.get("sleep_backup_gbs") for c in warm]),
        "backup_gbs_wake_warm": spread([c.get("wake_backup_gbs") for c in warm]),
    }
    return checks, targets


def child_exit(res):
    """The exit status a child result stands for."""
    checks = res.get("checks") or {}
    if res.get("status") == "error":
        return EXIT_ERROR
    if any(v is False for v in checks.values()):
        return EXIT_CHECK
    if not checks or any(v is None for v in checks.values()) or \
            res.get("cycles_done", 0) < res.get("cycles_requested", 0):
        return EXIT_INCOMPLETE
    return EXIT_OK


def timeout_exit(res):
    """A child killed at the deadline: a failed equality in the cycles it
    finished is a failure, otherwise the run was cut short."""
    bad = any(c.get(k) is False for c in res.get("cycles", [])
              for k in ("tokens_equal", "graph_equal", "weights_equal", "trainer_ok",
                        "kv_pool_ok"))
    return EXIT_CHECK if bad else EXIT_INCOMPLETE


def overall_exit(codes):
    for code in (EXIT_CHECK, EXIT_ERROR, EXIT_INCOMPLETE):
        if code in codes:
            return code
    return EXIT_OK if codes else EXIT_ERROR


# ================================================================ child side

class Proof:
    """One model's run in this process (torch imported, xseg installed)."""

    def __init__(self, args, res):
        self.args, self.res = args, res
        self.torch = self.xseg = None

    # ---- set-up ----

    def start(self):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if PYDIR not in sys.path:
            sys.path.insert(0, PYDIR)
        import xseg
        missing = [n for n in NEEDED if not hasattr(xseg, n)]
        if missing:
            raise RuntimeError(
                f"the xseg package at {xseg.__file__} lacks {missing}; this proof needs the "
                "tags/sleep API (tools/python/xseg/_sleep.py: xseg.tag, xseg.sleep, "
                "xseg.wake_up, xseg.tag_stats)")
        import torch
        xseg.install(self.args.xseg_conf)
        if not xseg.has_graph_hooks():
            raise RuntimeError(f"xseg.install() set no CUDA-graph pool hooks on torch "
                               f"{torch.__version__} ({xseg.hooks()}): graphs cannot be proved")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.cuda.init()
        import transformers
        self.torch, self.xseg, self.tf = torch, xseg, transformers
        self.res["env"] = {
            "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "xseg_version": xseg.version(),
            "xseg_library": xseg.library_path(), "xseg_hooks": list(xseg.hooks()),
            "xseg_conf": self.args.xseg_conf or os.environ.get("XSEG_CONF", ""),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
        say(f"{self.res['model']}: torch {torch.__version__}, transformers "
            f"{transformers.__version__}, {self.res['env']['gpu']}, xseg {xseg.version()}")

    def stage(self, name):
        """Record (and save) the step under way: a crash leaves it in the JSON."""
        self.res["stage"] = name
        self.res.setdefault("stages", []).append([name, round(time.time() - T0, 2)])
        write_json(self.args.child_out, self.res)
        say(name)

    def free(self):
        self.torch.cuda.synchronize()
        return int(self.torch.cuda.mem_get_info()[0])

    def tags(self):
        """The watched tags' stats, compact, plus the graph pools."""
        st = self.xseg.tag_stats()
        keep = ("live_bytes", "mapped_bytes", "sleeping_bytes", "backup_bytes", "asleep",
                "last_sleep_s", "last_wake_s")
        out = {n: {k: st[n].get(k) for k in keep} for n in WATCHED_TAGS if n in st}
        out["graph_pools"] = self.xseg.graph_pools()
        return out

    def config(self, layers=None):
        cfg_name, _, kw, _ = MODELS[self.res["model"]]
        kw = dict(kw)
        if layers is not None:
            kw["num_hidden_layers"] = layers
        cls = getattr(self.tf, cfg_name, None)
        if cls is None:
            raise RuntimeError(f"transformers {self.tf.__version__} has no {cfg_name}")
        try:
            return cls(attn_implementation="eager", **kw)
        except TypeError:
            cfg = cls(**kw)
            cfg._attn_implementation = "eager"
            return cfg

    def build(self, layers=None):
        torch = self.torch
        cls = getattr(self.tf, MODELS[self.res["model"]][1], None)
        if cls is None:
            raise RuntimeError(f"transformers {self.tf.__version__} has no "
                               f"{MODELS[self.res['model']][1]}")
        torch.manual_seed(self.args.seed)
        model = None
        with torch.device("cuda"):
            for kw in ("dtype", "torch_dtype"):
                try:
                    model = cls._from_config(self.config(layers), **{kw: torch.bfloat16})
                    break
                except TypeError:
                    continue
            if model is None:
                model = cls(self.config(layers))
        if next(model.parameters()).dtype != torch.bfloat16:
            model = model.to(torch.bfloat16)
        return model.eval()

    def warm_up(self):
        """cuBLAS / cuBLASLt workspaces of both streams, the trainer's
        kernels and a one-layer copy of the model, all in the default tag
        (never asleep), so that nothing made lazily on first use lands in a
        tag that sleeps."""
        torch = self.torch
        self.side = torch.cuda.Stream()
        for s in (torch.cuda.current_stream(), self.side):
            with torch.cuda.stream(s), torch.no_grad():
                a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(512, device="cuda", dtype=torch.bfloat16)
                (torch.nn.functional.linear(a, a, b) @ a).float().sum().item()
            s.synchronize()
        self.trainer(0, ballast=GiB)
        tiny = self.build(layers=1)
        self.generate(tiny, tag=None, new=2)
        del tiny
        torch.cuda.synchronize()
        self.xseg.empty_cache()

    def inputs(self):
        torch, a = self.torch, self.args
        vocab = MODELS[self.res["model"]][2]["vocab_size"]
        g = torch.Generator().manual_seed(a.seed + 1)
        self.ids = torch.randint(3, vocab, (a.batch, a.prompt), generator=g).cuda()
        self.mask = torch.ones_like(self.ids)
        self.static_cpu = torch.randint(3, vocab, (1, a.graph_tokens), generator=g)
        self.static_in = self.static_cpu.cuda()

    # ---- the workload ----

    def generate(self, model, tag="kv", new=None):
        """Greedy generate() under `tag`: the new tokens, on the CPU."""
        torch = self.torch
        new = new or self.args.new_tokens
        ctx = self.xseg.tag(tag) if tag else _Null()
        with torch.no_grad(), ctx:
            out = model.generate(input_ids=self.ids, attention_mask=self.mask, do_sample=False,
                                 max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
            toks = out[:, self.ids.shape[1]:].cpu()
            del out
        return toks

    def checksums(self, model):
        """Per parameter and buffer: the int64 sum of its bits (in chunks,
        under "kv": scratch)."""
        torch = self.torch
        views = {2: torch.int16, 4: torch.int32, 8: torch.int64}
        names, sums = [], []
        with torch.no_grad(), self.xseg.tag("kv"):
            named = list(model.named_parameters()) + list(model.named_buffers())
            for name, t in named:
                v = t.detach().reshape(-1).view(views.get(t.element_size(), torch.uint8))
                acc = torch.zeros((), dtype=torch.int64, device="cuda")
                for c in v.split(1 << 24):
                    acc += torch.sum(c, dtype=torch.int64)
                names.append(name)
                sums.append(acc)
            vals = torch.stack(sums).cpu().tolist()
            del sums
        return names, vals

    def trainer(self, cycle, ballast):
        """Another user of the GPU while the model sleeps: `ballast` bytes
        in 1 GiB tensors filled and checked, and bf16 matmuls, under tag
        "train"; then freed and the cache emptied."""
        torch, n = self.torch, self.args.matmul_n
        t0 = time.perf_counter()
        with torch.no_grad(), self.xseg.tag("train"):
            chunks = [min(GiB, ballast - i) for i in range(0, ballast, GiB)]
            held = [torch.full((c,), (k + cycle) % 251, dtype=torch.uint8, device="cuda")
                    for k, c in enumerate(chunks)]
            ok_ballast = all(bool((h[::MiB] == (k + cycle) % 251).all().item())
                             for k, h in enumerate(held))
            g = torch.Generator(device="cuda").manual_seed(self.args.seed + cycle)
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g) / n ** 0.5
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(self.args.matmul_steps):
                b = a @ b
            ok_math = bool(torch.isfinite(b).all().item())
            del held, a, b
        torch.cuda.synchronize()
        self.xseg.empty_cache()
        return {"ok": ok_ballast and ok_math, "ballast_ok": ok_ballast, "matmul_ok": ok_math,
                "ballast_bytes": int(ballast), "seconds": time.perf_counter() - t0}

    def refused_alloc(self):
        """An allocation under the sleeping tag "weights" must be refused.
        Asked of the C API (xseg_alloc_tagged on the device's allocator),
        not through torch.empty: PyTorch 2.11's pluggable allocator does
        not check for NULL, so a refused torch allocation yields a tensor
        without storage whose first kernel faults (issue 16)."""
        import ctypes
        from xseg import _sleep, _stats
        xs = _stats.allocator(None)
        ptr = ctypes.c_void_p()
        st = _sleep.fn("xseg_alloc_tagged")(xs, MiB, None, _sleep.tag_id("weights"),
                                           ctypes.byref(ptr))
        msg = self.xseg.last_error()
        return {"refused": st == 15 and not ptr.value, "status": int(st),
                "last_error": msg[:400],
                "how": "XSEG_ERR_ASLEEP" if st == 15 else "status %d" % st}

    # ---- the CUDA graph ----

    def capture(self, model):
        """Graph of the forward on the static input; warm-up and capture on
        the side stream (its workspaces are in the default tag)."""
        torch, info = self.torch, {}

        def full():
            return model(input_ids=self.static_in, use_cache=False).logits

        def layers():
            # every decoder layer on static embeddings, causal attention
            # without a mask (no host-side mask or position building)
            h = model.model.embed_tokens(self.static_in)
            pe = model.model.rotary_emb(h, self.static_pos)
            for layer in model.model.layers:
                o = layer(h, attention_mask=None, position_ids=self.static_pos,
                          position_embeddings=pe)
                h = o[0] if isinstance(o, tuple) else o
            return model.lm_head(model.model.norm(h))

        def part():
            layer = model.model.layers[-1]
            return model.lm_head(model.model.norm(layer.mlp(self.hidden)))

        self.hidden = torch.randn(1, self.args.graph_tokens, model.config.hidden_size,
                                  device="cuda", dtype=torch.bfloat16,
                                  generator=torch.Generator(device="cuda").manual_seed(7))
        self.static_pos = torch.arange(self.args.graph_tokens, device="cuda").unsqueeze(0)
        for kind, fn in (("forward(input_ids[1,S], use_cache=False).logits", full),
                         ("embeddings + every decoder layer + norm + lm_head, static "
                          "positions", layers),
                         ("last layer MLP + norm + lm_head on static hidden states", part)):
            try:
                g, out = self._capture(fn)
                info["kind"] = kind
                return g, out, info
            except Exception as e:  # noqa: BLE001 (recorded; the fallback follows)
                info.setdefault("failed", []).append(f"{kind}: {type(e).__name__}: {e}"[:600])
                say(f"graph capture of {kind} failed: {e}")
                torch.cuda.synchronize()
        raise RuntimeError(f"no CUDA graph could be captured: {info['failed']}")

    def _capture(self, fn):
        torch = self.torch
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad():
            with self.xseg.tag("kv"), torch.cuda.stream(self.side):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(self.side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=self.side):
                out = fn()
        torch.cuda.synchronize()
        return g, out

    def replay(self):
        self.static_in.copy_(self.static_cpu)
        self.graph.replay()
        self.torch.cuda.synchronize()
        return self.graph_out.cpu()

    # ---- the run ----

    def setup(self):
        a, torch, xseg = self.args, self.torch, self.xseg
        s = self.res["setup"] = {}
        self.stage("warm-up: cuBLAS workspaces, trainer kernels, a one-layer model")
        self.inputs()
        self.warm_up()
        s["free_before_load"] = self.free()
        s["total_bytes"] = int(torch.cuda.mem_get_info()[1])
        self.stage(f"loading the model under tag weights (free before load: "
                   f"{s['free_before_load'] / GiB:.2f} GiB)")
        t0 = time.perf_counter()
        with xseg.tag("weights"):
            self.model = self.build()
        s["load_s"] = time.perf_counter() - t0
        s["free_after_load"] = self.free()
        s["model_bytes"] = sum(t.numel() * t.element_size() for t in
                               list(self.model.parameters()) + list(self.model.buffers()))
        s["params"] = sum(p.numel() for p in self.model.parameters())
        w = xseg.tag_stats()["weights"]["live_bytes"]
        s["weights_tag_live_bytes"] = w
        s["weights_in_tag"] = w >= 0.99 * s["model_bytes"]
        say(f"model: {s['params'] / 1e9:.2f} B parameters, {s['model_bytes'] / 1e9:.2f} GB, "
            f"tag weights holds {w / 1e9:.2f} GB live; load {s['load_s']:.1f} s")
        with xseg.tag("kv"):
            kv_bytes = int(a.kv_gib * GiB) if a.kv_gib is not None else \
                int(MODELS[self.res["model"]][3] * GiB)
            self.kv_pool = torch.full((kv_bytes // 2,), 1.5, dtype=torch.bfloat16,
                                      device="cuda")
        s["kv_pool_bytes"] = kv_bytes
        self.stage("reference generate() under tag kv, twice")
        t0 = time.perf_counter()
        self.ref_tokens = self.generate(self.model)
        s["generate_s"] = time.perf_counter() - t0
        s["deterministic_without_sleep"] = bool(self.torch.equal(self.generate(self.model),
                                                                 self.ref_tokens))
        s["tokens_shape"] = list(self.ref_tokens.shape)
        s["tokens_head"] = self.ref_tokens[0, :16].tolist()
        self.stage("weight checksums, CUDA graph capture")
        self.ref_names, self.ref_sums = self.checksums(self.model)
        self.graph, self.graph_out, ginfo = self.capture(self.model)
        self.ref_graph = self.replay()
        ginfo["deterministic"] = bool(torch.equal(self.replay(), self.ref_graph))
        ginfo["output_shape"] = list(self.ref_graph.shape)
        s["graph"] = ginfo
        s["free_after_setup"] = self.free()
        s["tags_after_setup"] = self.tags()
        say(f"setup done: generate {s['generate_s']:.2f} s, deterministic "
            f"{s['deterministic_without_sleep']}, graph {ginfo['kind']!r} deterministic "
            f"{ginfo['deterministic']}, free {s['free_after_setup'] / GiB:.2f} GiB")

    def cycle(self, i):
        a, torch, xseg = self.args, self.torch, self.xseg
        c = {"cycle": i, "sleep_ok": False, "wake_ok": False}
        self.res["stage"] = f"cycle {i}"
        c["free_before_sleep"] = self.free()
        t0 = time.perf_counter()
        c["slept"] = list(xseg.sleep(mode=dict(SLEEP_MODES)))
        c["sleep_s"] = time.perf_counter() - t0
        c["sleep_ok"] = True
        c["free_after_sleep"] = self.free()
        c["tags_after_sleep"] = self.tags()
        backup = sum(c["tags_after_sleep"].get(n, {}).get("backup_bytes") or 0
                     for n in ("weights",))
        c["backup_bytes_weights"] = backup
        if i == 0:
            c["refused"] = self.refused_alloc()
        scribble = a.scribble_every > 0 and i % a.scribble_every == 0
        ballast = int(a.train_gib * GiB)
        if scribble:
            ballast = max(ballast, min(self.free() - 8 * GiB, 128 * GiB))
        c["trainer"] = self.trainer(i + 1, max(ballast, 0))
        c["trainer_ok"] = c["trainer"]["ok"]
        c["free_after_trainer"] = self.free()
        t0 = time.perf_counter()
        xseg.wake_up(tags=tuple(SLEEP_MODES))
        torch.cuda.synchronize()
        c["wake_s"] = time.perf_counter() - t0
        c["wake_ok"] = True
        c["free_after_wake"] = self.free()
        if backup:
            c["sleep_backup_gbs"] = backup / c["sleep_s"] / 1e9
            c["wake_backup_gbs"] = backup / c["wake_s"] / 1e9
        self.check(c, i)
        return c

    def check(self, c, i):
        torch = self.torch
        toks = self.generate(self.model)
        c["tokens_equal"] = bool(torch.equal(toks, self.ref_tokens))
        if not c["tokens_equal"]:
            diff = (toks != self.ref_tokens)
            c["tokens_differing"] = int(diff.sum())
            c["first_differing_row_col"] = [int(x) for x in diff.nonzero()[0]]
        c["graph_equal"] = bool(torch.equal(self.replay(), self.ref_graph))
        names, sums = self.checksums(self.model)
        bad = [n for n, x, y in zip(names, sums, self.ref_sums) if x != y]
        c["weights_equal"] = names == self.ref_names and not bad
        if bad:
            c["weights_differing"] = {"count": len(bad), "first": bad[:8]}
        v = float(i % 100 + 2)
        self.kv_pool.fill_(v)
        c["kv_pool_ok"] = bool((self.kv_pool[::4096] == v).all().item())

    def run(self):
        a = self.args
        self.stage("start: xseg.install(), imports")
        self.start()
        self.setup()
        self.res["status"] = "cycling"
        write_json(a.child_out, self.res)
        longest = 3 * self.res["setup"]["generate_s"] + 5  # a guess until a cycle ran
        for i in range(a.cycles):
            left = a.deadline_at - time.time() if a.deadline_at else None
            if left is not None and left < 1.5 * longest + 10:
                say(f"stopping before cycle {i}: {left:.0f} s left, a cycle takes up to "
                    f"{longest:.0f} s")
                self.res["stopped_early"] = f"deadline: {left:.0f} s left before cycle {i}"
                break
            t0 = time.perf_counter()
            c = self.cycle(i)
            c["cycle_s"] = time.perf_counter() - t0
            longest = max(longest, c["cycle_s"])
            self.res["cycles"].append(c)
            self.res["cycles_done"] = i + 1
            write_json(a.child_out, self.res)
            say(f"cycle {i}: sleep {c['sleep_s'] * 1e3:.0f} ms, wake {c['wake_s'] * 1e3:.0f} "
                f"ms, free after sleep {c['free_after_sleep'] / GiB:.2f} GiB (before load "
                f"{self.res['setup']['free_before_load'] / GiB:.2f}), tokens "
                f"{'=' if c['tokens_equal'] else 'DIFFER'}, graph "
                f"{'=' if c['graph_equal'] else 'DIFFERS'}, weights "
                f"{'=' if c['weights_equal'] else 'DIFFER'}, trainer "
                f"{'ok' if c['trainer_ok'] else 'FAILED'}")
            if not (c["tokens_equal"] and c["graph_equal"] and c["weights_equal"]):
                if a.stop_on_failure:
                    break


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def child_main(args):
    res = {"model": args.child, "status": "starting", "cycles": [], "cycles_done": 0,
           "cycles_requested": args.cycles, "sleep_modes": SLEEP_MODES,
           "options": {k: v for k, v in vars(args).items() if k not in ("child_out",)}}
    proof = Proof(args, res)
    try:
        proof.run()
        res["status"] = "done"
    except Exception as e:  # noqa: BLE001 (recorded; the exit status says it)
        res["status"] = "error"
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()
        say(f"{args.child}: ERROR {res['error']}\n{res['traceback']}")
        if proof.xseg is not None:
            try:
                res["xseg_last_error"] = proof.xseg.last_error()
            except Exception:  # noqa: BLE001
                pass
    res["checks"], res["targets"] = summarize(res, args.leak_tol_mib * MiB)
    res["exit"] = child_exit(res)
    write_json(args.child_out, res)
    return res["exit"]


# =============================================================== parent side

def child_command(args, model, out, deadline_at):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--child-out", out,
           "--cycles", str(args.cycles), "--deadline-at", f"{deadline_at:.1f}"]
    for opt in ("new_tokens", "batch", "prompt", "graph_tokens", "train_gib", "kv_gib",
                "matmul_n", "matmul_steps", "scribble_every", "seed", "leak_tol_mib",
                "xseg_conf"):
        val = getattr(args, opt)
        if val is not None:
            cmd += ["--" + opt.replace("_", "-"), str(val)]
    if args.stop_on_failure:
        cmd.append("--stop-on-failure")
    return cmd


def run_child(args, model, out_dir, end):
    """One model in a fresh process, bounded by the deadline."""
    path = os.path.join(out_dir, f"sleep_proof.{model}.json")
    left = end - time.time()
    if left < args.min_model_s:
        return {"model": model, "status": "skipped",
                "reason": f"{left:.0f} s left before the deadline (< {args.min_model_s} s)",
                "exit": EXIT_INCOMPLETE}
    cmd = child_command(args, model, path, end - 15)
    os.environ["SLEEP_PROOF_T0"] = str(T0)
    say(f"{model}: child process, {left:.0f} s at most: {' '.join(cmd[2:])}")
    if os.path.exists(path):
        os.remove(path)
    t0 = time.time()
    timed_out = False
    try:
        rc = subprocess.run(cmd, timeout=max(left - 5, 10)).returncode
        crash = None if rc in (0, 1, 2, 3) else f"exit status {rc}"
    except subprocess.TimeoutExpired:
        rc, timed_out = None, True
        crash = f"killed after {time.time() - t0:.0f} s (deadline)"
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        res = {"model": model, "status": "error", "error": f"no result file ({e})"}
    if crash:
        res["error"] = f"child {crash}; last status {res.get('status')!r}" + \
            (f"; {res['error']}" if res.get("error") else "")
        res["checks"], res["targets"] = summarize(res, args.leak_tol_mib * MiB)
        res["status"] = "timeout" if timed_out else "error"
        res["exit"] = timeout_exit(res) if timed_out else EXIT_ERROR
    res["child_exit_status"] = rc
    res["child_seconds"] = time.time() - t0
    return res


def report(models):
    for name, r in models.items():
        say(f"== {name}: {r.get('status')} (exit {r.get('exit')}), "
            f"{r.get('cycles_done', 0)}/{r.get('cycles_requested', '?')} cycles")
        if r.get("error"):
            say(f"   error: {r['error']}")
        for k, v in (r.get("checks") or {}).items():
            say(f"   check  {k:32s} {'not reached' if v is None else 'ok' if v else 'FAILED'}")
        t = r.get("targets") or {}
        for k in ("after_sleep_within_1pct_of_before_load",
                  "after_sleep_shortfall_pct_of_free_before_load", "sleep_s_warm",
                  "wake_s_warm", "backup_gbs_sleep_warm", "backup_gbs_wake_warm"):
            if k in t:
                say(f"   target {k:32s} {json.dumps(t[k], default=str)}")


def parent_main(args):
    models = args.models or (["qwen2-1.5b"] if args.quick else list(MODELS))
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"sleep_proof: unknown model(s) {unknown}; known: {list(MODELS)}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    end = T0 + args.deadline
    doc = {"tool": "tools/gpu/sleep_proof.py", "command": sys.argv, "quick": args.quick,
           "cycles": args.cycles, "deadline_s": args.deadline, "sleep_modes": SLEEP_MODES,
           "models": {}, "exit": None}
    write_json(args.out, doc)
    for m in models:
        doc["models"][m] = run_child(args, m, out_dir, end)
        write_json(args.out, doc)
    doc["exit"] = overall_exit([r.get("exit", EXIT_ERROR) for r in doc["models"].values()])
    doc["seconds"] = time.time() - T0
    write_json(args.out, doc)
    report(doc["models"])
    say(f"exit {doc['exit']} (0 ok, 1 a check failed, 2 an error, 3 cut short); {args.out}")
    return doc["exit"]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="qwen2-1.5b only, 3 cycles")
    p.add_argument("--models", nargs="+", help=f"of {list(MODELS)}")
    p.add_argument("--cycles", type=int, help="sleep/wake cycles per model (20; quick 3)")
    p.add_argument("--out", default="sleep_proof.json")
    p.add_argument("--deadline", type=float, default=480,
                   help="seconds for the whole run; cycles and models past it are skipped")
    p.add_argument("--min-model-s", type=float, default=60,
                   help="a model is not started with less time than this left")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--graph-tokens", type=int, default=16)
    p.add_argument("--train-gib", type=float, default=4.0,
                   help="the trainer's ballast in GiB (scribble cycles: all free but 8 GiB)")
    p.add_argument("--scribble-every", type=int, default=5)
    p.add_argument("--kv-gib", type=float, help="KV pool under tag kv (1.5b: 2, 8b: 8)")
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--matmul-steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--leak-tol-mib", type=int, default=256)
    p.add_argument("--xseg-conf", help="conf for xseg.install() (default: XSEG_CONF)")
    p.add_argument("--stop-on-failure", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    p.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cycles is None:
        args.cycles = 3 if args.quick else 20
    if args.cycles < 1 or args.batch < 1 or args.prompt < 1 or args.new_tokens < 1:
        p.error("cycles, batch, prompt and new-tokens must be >= 1")
    return args


def main(argv=None):
    args = parse(argv)
    if args.child:
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
