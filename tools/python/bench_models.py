#!/usr/bin/env python3
"""bench_models.py: real Hugging Face models under three allocators.

Workloads (random weights from configs built here, nothing downloaded;
transformers 5.x):
  llama  a Llama-3.2-1B-shaped decoder in bf16 serving greedy generate()
         calls with batch 1-16, prompts 16-1024, 16-32 new tokens (a growing
         KV cache);
  gpt2   a GPT-2-medium-shaped model training with AdamW under bf16
         autocast, batch and sequence length varying every step;
  moe    a Mixtral-shaped mixture of experts (8 experts, top 2, the eager
         expert loop) training with AdamW under bf16 autocast: the routing
         gives every expert a different number of tokens each step;
  bert   a BERT-large-shaped encoder serving embeddings in bf16 under
         torch.no_grad(): batch 1-64, length 32-512, padded rows of random
         length, mean-pooled;
  vit    a ViT-Base/16 image classifier training with AdamW under bf16
         autocast at a different batch and resolution every step (160-448 px;
         position embeddings interpolated and frozen: the bicubic resize
         has no deterministic backward on CUDA);
  graph  a transformer layer captured with torch.cuda.graph and replayed
         (CUDA graphs work, the graph's memory stays its own);
  probe  (only when named) pieces of the llama model timed alone: GPU reads of
         the weights, a prefill, a generate(), torch.empty + del.
--quick makes each smaller (llama 4 layers, gpt2 GPT-2-small, moe 4 layers,
bert BERT-base, shorter schedules): a few seconds of GPU work each.
Modes: native (PyTorch's caching allocator), expandable
(expandable_segments:True) and xseg (xseg.install()).  --variant CONF adds a
mode "xseg[CONF]": xseg with that conf, run in the same rotation as the
others (so that a machine's drift over the run hits every mode alike).

Each run is a fresh subprocess with the same seed and a timeout: one per
(workload, mode, round), or with --per-process round one per (mode, round)
that runs every workload in turn (their order rotated each round, the same
for every mode of a round), giving everything back between two workloads
(gc, cuBLAS workspaces, empty_cache) and resetting the peaks, so that each
workload's peak counts from there.  --rounds N runs every (workload, mode) N
times in interleaved rotating order (bench_report.schedule).  Reported per
(workload, mode): the median over the rounds of the throughput (for each
call or step its fastest run over the passes after the first), with
min..max and the relative spread, and the median peak device memory taken
(cudaMemGetInfo drop from before the model to the peak, with the
allocator's reserved peak so that memory mapped and unmapped between two
polls counts); a hash of the outputs (generated tokens, losses, embeddings,
graph outputs) that must be equal across modes and rounds; and per workload
the verdict of issue 13's figure: xseg median throughput >= max(native,
expandable) * 0.99 and xseg median peak <= expandable's (bench_report.py);
then the same figure paired by round (bench_report.paired: xseg over the
faster peer of its own round, the median of those ratios and an interval for
it that says whether the rounds can decide the 1% at all).
--trace-dir records xseg's allocations as an xseg-trace v1 file.  Errors are
caught and reported; the JSON is rewritten after every run.

The figure's run (issue 13: >= 4 families, >= 5 rounds), on the H200, in one
device call: 15 processes (3 modes x 5 rounds), each about 6 s of start-up
(torch and transformers imports, CUDA init) and 10-15 s for the five quick
workloads, so about 4-5 minutes; never past --budget (a round that would not
fit is skipped and reported, a stuck process is killed after --timeout x 5
+ 30 s):

    PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
        python3 tools/python/bench_models.py --quick --per-process round \\
        --rounds 5 --workloads llama gpt2 moe bert vit --budget 450 \\
        --timeout 40 --out $OUT/models.json

Full-size models, one process per workload (llama, gpt2 and graph unless
--workloads names others):

    PYTHONPATH=tools/python XSEG_LIBRARY=build/lib/libxseg.so.0 \\
        python3 tools/python/bench_models.py --out pytorch.json
"""
import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import bench_report as report
# The corpus's model builder (random weights on the GPU, either transformers
# keyword): one copy for the capture and this benchmark.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from corpus_workloads import build  # noqa: E402 (its folder first)
from bench_report import (FAMILIES, MODES, WORKLOADS, aggregate, compare,  # noqa: F401
                          fmt_gib, is_xseg, markdown, rows, schedule, table)

GiB = float(1 << 30)

# (batch, prompt length, new tokens)
LLAMA_CALLS = ((1, 16, 32), (4, 128, 32), (16, 64, 16), (8, 1024, 16), (2, 512, 32),
               (16, 256, 24), (1, 1024, 32), (12, 384, 16), (4, 768, 24), (16, 1024, 16),
               (6, 32, 32), (10, 640, 20))
LLAMA_QUICK = ((1, 16, 16), (4, 128, 16), (16, 64, 12), (8, 1024, 8), (2, 512, 16),
               (16, 512, 8))
# (batch, sequence length)
GPT2_STEPS = ((8, 512), (4, 1024), (16, 256), (2, 1024), (12, 384), (6, 768), (16, 512),
              (3, 896), (10, 640), (8, 1024))
GPT2_QUICK = GPT2_STEPS[:6]
MOE_STEPS = ((4, 512), (8, 256), (2, 1024), (6, 384), (8, 512), (3, 768), (12, 128), (4, 1024))
MOE_QUICK = MOE_STEPS[:6]
# (batch, padded length): each row has its own length, a quarter to all of it
BERT_CALLS = ((32, 128), (8, 512), (64, 64), (16, 256), (1, 512), (48, 96), (4, 384),
              (24, 320), (64, 128), (12, 448), (2, 32), (40, 192))
BERT_QUICK = BERT_CALLS[:8]
# (batch, image side in pixels, a multiple of the patch)
VIT_STEPS = ((32, 224), (16, 320), (64, 160), (8, 448), (24, 256), (48, 192), (12, 384),
             (32, 288))
VIT_QUICK = VIT_STEPS[:6]
# Limits of the configs below, checked by the tests.
MAX_POSITIONS = {"llama": 4096, "gpt2": 1024, "moe": 4096, "bert": 512}
VIT_PATCH = 16
START_S = 30  # seconds a subprocess may take to start, over --timeout per workload


# ---------------------------------------------------------------- child side

class Meter:
    """Peak device memory: cudaMemGetInfo drop since the baseline, and the
    memory outside the allocator plus the allocator's reserved peak (reset
    by fresh_start before each workload).  xseg's counters are reported as
    they end and as what this workload added."""

    def __init__(self, torch, stats):
        self.torch, self.stats = torch, stats
        torch.cuda.synchronize()
        self.base_free = torch.cuda.mem_get_info()[0]
        self.peak_drop = 0
        self.peak_device = 0
        self.xseg_start = xseg_part(stats())

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
        xs = xseg_part(st)
        return {"peak_device_bytes": self.peak_device, "peak_drop_polled_bytes": self.peak_drop,
                "peak_reserved_bytes": st.get("reserved_bytes.all.peak", 0),
                "peak_allocated_bytes": st.get("allocated_bytes.all.peak", 0),
                "peak_requested_bytes": st.get("requested_bytes.all.peak", 0),
                "final_reserved_bytes": st.get("reserved_bytes.all.current", 0),
                "xseg_stats": xs,
                "xseg_stats_added": {k: v - self.xseg_start[k] for k, v in xs.items()
                                     if isinstance(v, (int, float)) and k in self.xseg_start}}


def xseg_part(st):
    return {k: v for k, v in st.items() if k.startswith("xseg.")}


def fresh_start(torch):
    """Before each workload: the last one's objects collected, cuBLAS's
    workspaces (held by the allocator) dropped, the cache given back
    (xseg's reset hook in xseg mode) and the peaks reset, so that the
    workload's peak counts from here even after others in this process."""
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def need(module, name):
    """module.name, or an error that says which class this transformers lacks."""
    found = getattr(module, name, None)
    if found is None:
        raise RuntimeError(f"transformers {getattr(module, '__version__', '?')} has no {name}; "
                           f"this workload needs it (transformers 5.x has it)")
    return found


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
    if is_xseg(mode):
        import xseg
        if trace:
            base = xseg_conf if xseg_conf is not None else os.environ.get("XSEG_CONF", "")
            xseg_conf = (base + "," if base else "") + f"history:{HISTORY}"
        xseg.install(xseg_conf, native=mode == "xseg-native")
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


def llama_config(transformers, layers=16):
    """Llama-3.2-1B shapes: 1.24 B parameters (with 16 layers)."""
    return make_config(
        need(transformers, "LlamaConfig"), "eager", vocab_size=128256, hidden_size=2048,
        intermediate_size=8192, num_hidden_layers=layers, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=MAX_POSITIONS["llama"],
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def llama_pass(torch, model, meter, seed, digest, sched, calls=None):
    """One pass over the calls of sched: (generated tokens, seconds)."""
    tokens, seconds = 0, 0.0
    for i, (b, plen, new) in enumerate(sched):
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


def run_llama(torch, stats, seed, passes, quick=False):
    import transformers
    sched = LLAMA_QUICK if quick else LLAMA_CALLS
    meter = Meter(torch, stats)
    model = build(torch, need(transformers, "LlamaForCausalLM"),
                  llama_config(transformers, 4 if quick else 16), torch.bfloat16, seed).eval()
    meter.poll()
    digests, rates, calls = [], [], []
    with torch.no_grad():
        for p in range(passes):
            d = hashlib.sha256()
            calls.append([])
            tokens, secs = llama_pass(torch, model, meter, seed, d, sched, calls[-1])
            digests.append(d.hexdigest())
            if p > 0 or passes == 1:
                rates.append(tokens / secs)
    out = meter.result()
    work = [b * new for b, _, new in sched]
    out.update(throughput=best_of_calls(calls, work), throughput_unit="generated tokens/s",
               throughput_best_pass=max(rates), throughput_all=rates, output_hash=digests[0],
               outputs_stable_across_passes=len(set(digests)) == 1, call_times=calls,
               params=sum(p.numel() for p in model.parameters()))
    return out


def train_pass(torch, model, opt, meter, seed, steps, inputs, losses, calls=None):
    """One pass of training steps with AdamW under bf16 autocast; inputs(g,
    step) gives a step's keyword arguments for the model (labels included)
    from its own generator g.  Returns the seconds of the steps."""
    seconds = 0.0
    for i, shape in enumerate(steps):
        g = torch.Generator().manual_seed(seed + i)
        kw = inputs(g, shape)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**kw).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

        loss, dt = timed(torch, step, calls)
        losses.append(loss)
        seconds += dt
        del kw
        meter.poll()
    return seconds


def run_train(torch, stats, seed, passes, make_model, steps, inputs, work, unit):
    """A training workload: make_model() -> (model, info) built after the
    meter's baseline (weights, gradients and AdamW's state all count), then
    `passes` passes over steps; work[i] is what step i does (tokens,
    images).  The output hash is over every loss."""
    meter = Meter(torch, stats)
    model, info = make_model()
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                            weight_decay=0.01)
    meter.poll()
    losses, rates, steps_rates, calls = [], [], [], []
    for p in range(passes):
        calls.append([])
        secs = train_pass(torch, model, opt, meter, seed, steps, inputs, losses, calls[-1])
        if p > 0 or passes == 1:
            rates.append(sum(work) / secs)
            steps_rates.append(len(steps) / secs)
    out = meter.result()
    out.update(info)
    out.update(throughput=best_of_calls(calls, work), throughput_unit=unit,
               throughput_best_pass=max(rates), steps_per_s=max(steps_rates),
               throughput_all=rates, losses=losses, call_times=calls,
               output_hash=hashlib.sha256(repr(losses).encode()).hexdigest(),
               params=sum(p.numel() for p in model.parameters()))
    return out


def gpt2_config(transformers, quick=False):
    """GPT-2 medium shapes: 355 M parameters; quick: GPT-2 small, 124 M
    (eager attention: deterministic backward)."""
    width, layers, heads = (768, 12, 12) if quick else (1024, 24, 16)
    return make_config(
        need(transformers, "GPT2Config"), "eager", vocab_size=50257,
        n_positions=MAX_POSITIONS["gpt2"], n_embd=width, n_layer=layers, n_head=heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)


def lm_inputs(torch, low, vocab):
    """inputs(g, (batch, length)) of a causal LM: random ids, labels = ids."""
    def inputs(g, shape):
        ids = torch.randint(low, vocab, shape, generator=g).cuda()
        return {"input_ids": ids, "labels": ids}
    return inputs


def run_gpt2(torch, stats, seed, passes, quick=False):
    import transformers
    steps = GPT2_QUICK if quick else GPT2_STEPS

    def make():
        return build(torch, need(transformers, "GPT2LMHeadModel"),
                     gpt2_config(transformers, quick), torch.float32, seed), {}

    return run_train(torch, stats, seed, passes, make, steps, lm_inputs(torch, 0, 50257),
                     [b * q for b, q in steps], "training tokens/s")


def moe_config(transformers, quick=False):
    """Mixtral shapes, scaled down: hidden 1024, 8 experts of 2816, top 2,
    8 layers (quick: 4), 32k vocabulary; about 0.64 B parameters (0.36 B
    quick), router aux loss on."""
    return make_config(
        need(transformers, "MixtralConfig"), "eager", vocab_size=32000, hidden_size=1024,
        intermediate_size=2816, num_hidden_layers=4 if quick else 8, num_attention_heads=16,
        num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=MAX_POSITIONS["moe"], output_router_logits=True,
        router_aux_loss_coef=0.01, router_jitter_noise=0.0, attention_dropout=0.0,
        tie_word_embeddings=False, use_cache=False, bos_token_id=1, eos_token_id=2,
        pad_token_id=0)


def eager_experts(model):
    """The eager expert loop (transformers 5 may pick a fused grouped_mm
    kernel): per expert, its tokens gathered, computed and added back with
    index_add_, deterministic under torch's deterministic mode; what a
    plain MoE allocates.  Returns the implementation in use."""
    setter = getattr(model, "set_experts_implementation", None)
    if setter is not None:
        try:
            setter("eager")
        except Exception as e:  # noqa: BLE001 (recorded; the default then runs)
            return f"default ({type(e).__name__}: {e})"
    return getattr(model.config, "_experts_implementation", None) or "eager"


def run_moe(torch, stats, seed, passes, quick=False):
    import transformers
    steps = MOE_QUICK if quick else MOE_STEPS

    def make():
        model = build(torch, need(transformers, "MixtralForCausalLM"),
                      moe_config(transformers, quick), torch.float32, seed)
        return model, {"experts_implementation": eager_experts(model)}

    return run_train(torch, stats, seed, passes, make, steps, lm_inputs(torch, 3, 32000),
                     [b * q for b, q in steps], "training tokens/s")


def vit_config(transformers):
    """ViT-Base/16 at 224 px: 86 M parameters, 1000 classes."""
    return make_config(
        need(transformers, "ViTConfig"), "eager", hidden_size=768, num_hidden_layers=12,
        num_attention_heads=12, intermediate_size=3072, image_size=224, patch_size=VIT_PATCH,
        num_labels=1000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def freeze_positions(model):
    """Position embeddings out of training: at another resolution they are
    resized bicubically, whose backward has no deterministic CUDA kernel."""
    frozen = []
    for name, p in model.named_parameters():
        if name.endswith("position_embeddings"):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def run_vit(torch, stats, seed, passes, quick=False):
    import transformers
    steps = VIT_QUICK if quick else VIT_STEPS

    def make():
        model = build(torch, need(transformers, "ViTForImageClassification"),
                      vit_config(transformers), torch.float32, seed)
        return model, {"frozen": freeze_positions(model)}

    def inputs(g, shape):
        b, side = shape
        return {"pixel_values": torch.randn(b, 3, side, side, generator=g).cuda(),
                "labels": torch.randint(0, 1000, (b,), generator=g).cuda(),
                "interpolate_pos_encoding": True}

    return run_train(torch, stats, seed, passes, make, steps, inputs, [b for b, _ in steps],
                     "training images/s")


def bert_config(transformers, quick=False):
    """BERT-large shapes (335 M parameters); quick: BERT-base (110 M)."""
    width, layers, heads = (768, 12, 12) if quick else (1024, 24, 16)
    return make_config(
        need(transformers, "BertConfig"), "eager", vocab_size=30522, hidden_size=width,
        num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * width,
        max_position_embeddings=MAX_POSITIONS["bert"], hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=0)


def bert_batch(torch, g, b, s):
    """Random ids, each row of a random length (a quarter to all of s),
    padded with 0: (ids, mask, real tokens)."""
    ids = torch.randint(1000, 30522, (b, s), generator=g)
    lengths = torch.randint(max(1, s // 4), s + 1, (b,), generator=g)
    mask = (torch.arange(s)[None, :] < lengths[:, None]).long()
    return (ids * mask).cuda(), mask.cuda(), int(lengths.sum())


def bert_pass(torch, model, meter, seed, sched, digest, calls=None):
    """One pass of embedding calls: mean-pooled, normalised embeddings;
    returns the real tokens of each call."""
    work = []
    for i, (b, s) in enumerate(sched):
        ids, mask, tokens = bert_batch(torch, torch.Generator().manual_seed(seed + i), b, s)

        def embed():
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            m = mask.unsqueeze(-1).float()
            return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

        out, _ = timed(torch, embed, calls)
        digest.update(out.cpu().numpy().tobytes())
        work.append(tokens)
        del out, ids, mask
        meter.poll()
    return work


def run_bert(torch, stats, seed, passes, quick=False):
    import transformers
    sched = BERT_QUICK if quick else BERT_CALLS
    meter = Meter(torch, stats)
    model = build(torch, need(transformers, "BertModel"), bert_config(transformers, quick),
                  torch.bfloat16, seed).eval()
    meter.poll()
    digests, calls, work = [], [], []
    with torch.no_grad():
        for _ in range(passes):
            d = hashlib.sha256()
            calls.append([])
            work = bert_pass(torch, model, meter, seed, sched, d, calls[-1])
            digests.append(d.hexdigest())
    out = meter.result()
    out.update(throughput=best_of_calls(calls, work), throughput_unit="embedded tokens/s",
               output_hash=digests[0], outputs_stable_across_passes=len(set(digests)) == 1,
               call_times=calls, params=sum(p.numel() for p in model.parameters()))
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


def run_graph(torch, stats, seed, passes, quick=False):
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


def run_probe(torch, stats, seed, passes, quick=False):
    """Where time goes on the llama model, piece by piece: GPU reads of the
    weights (are xseg's mappings slower for kernels?), a GPU-bound prefill, a
    CPU-bound generate(), and the Python-level allocation cost."""
    import transformers
    meter = Meter(torch, stats)
    model = build(torch, need(transformers, "LlamaForCausalLM"), llama_config(transformers),
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


RUNNERS = {"llama": run_llama, "gpt2": run_gpt2, "moe": run_moe, "bert": run_bert,
           "vit": run_vit, "graph": run_graph, "probe": run_probe}


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


def child_setup(args, trace):
    """setup_mode with its seconds: (torch, stats, info)."""
    t0 = time.perf_counter()
    torch, stats, info = setup_mode(args.mode, args.xseg_conf, trace)
    info["setup_s"] = time.perf_counter() - t0
    return torch, stats, info


def child_workload(args, torch, stats, workload, trace):
    """One workload in this process, after fresh_start: its result fields."""
    fresh_start(torch)
    t0 = time.perf_counter()
    result = RUNNERS[workload](torch, stats, args.seed, args.passes, args.quick)
    result["wall_s"] = time.perf_counter() - t0
    if trace:
        import xseg
        os.makedirs(args.trace_dir, exist_ok=True)
        result["recorded"] = write_trace(
            os.path.join(args.trace_dir, f"{workload}_live.csv.gz"),
            json.loads(xseg.history_json(0)))
    if not is_xseg(args.mode):
        result["expandable_segments_seen"] = any(
            seg.get("is_expandable", False) for seg in torch.cuda.memory_snapshot())
    return result


def failure(e):
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def child(args):
    """Runs the workloads of --workload (comma-separated) in turn; the list
    of results is rewritten after each, so a crash or a timeout keeps the
    ones done."""
    workloads = args.workload.split(",")
    trace = bool(args.trace_dir) and is_xseg(args.mode)
    done, rc = [], 0

    def save():  # whole or not at all: a crash mid-write leaves the last list
        with open(args.child_out + ".tmp", "w") as f:
            json.dump(done, f)
        os.replace(args.child_out + ".tmp", args.child_out)

    try:
        torch, stats, info = child_setup(args, trace)
    except BaseException as e:  # noqa: BLE001 (everything goes to the report)
        done = [dict(workload=w, mode=args.mode, seed=args.seed, **failure(e)) for w in workloads]
        save()
        return 1
    for pos, w in enumerate(workloads):
        result = dict(info, workload=w, mode=args.mode, seed=args.seed, quick=args.quick,
                      position_in_process=pos)
        try:
            result.update(child_workload(args, torch, stats, w, trace))
        except BaseException as e:  # noqa: BLE001
            result.update(failure(e))
            rc = 1
        done.append(result)
        save()
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


def child_command(args, mode, workloads, out):
    """The subprocess's command line and environment for a job."""
    child_mode, conf = split_mode(mode, args.xseg_conf)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--workload",
           ",".join(workloads), "--mode", child_mode, "--seed", str(args.seed),
           "--passes", str(args.passes), "--child-out", out]
    if args.quick:
        cmd.append("--quick")
    if conf:
        cmd += ["--xseg-conf", conf]
    if args.trace_dir:
        cmd += ["--trace-dir", os.path.abspath(args.trace_dir)]
    return cmd, mode_env(child_mode)


def run_job(args, mode, workloads, timeout):
    """One subprocess running workloads in mode: a result per workload (an
    error for those it did not finish)."""
    child_mode, conf = split_mode(mode, args.xseg_conf)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd, env = child_command(args, mode, workloads, out)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            rc, stderr = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = "timeout"
            stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (
                e.stderr or "")
        got = []
        if os.path.exists(out):
            with open(out) as f:
                got = json.load(f)
    secs = time.perf_counter() - t0
    by = {r["workload"]: r for r in got}
    results = []
    for w in workloads:
        res = by.get(w) or {"workload": w, "error": f"not finished: subprocess ended with {rc}"}
        res.update(mode=mode, returncode=rc, subprocess_s=secs, workloads_in_process=workloads)
        if conf and child_mode == "xseg":
            res["xseg_conf"] = conf
        if rc != 0 and "error" not in res:
            res["process_error"] = f"subprocess ended with {rc} after this workload"
        if rc != 0:
            res["stderr_tail"] = stderr[-4000:]
        results.append(res)
    return results


def write(path, args, runs, results, verdict, started, progress):
    doc = {"command": " ".join([os.path.basename(sys.executable)]
                               + [portable(a) for a in sys.argv]),
           "seed": args.seed, "passes": args.passes, "rounds": args.rounds,
           "quick": args.quick, "per_process": args.per_process,
           "xseg_conf": args.xseg_conf,
           "started": started, "elapsed_s": time.time() - started, "progress": progress,
           "results": [results[k] for k in sorted(results)], "verdict": verdict,
           "figure": report.overall(verdict),
           "summary": report.summary(results, verdict),
           "markdown": markdown(results, verdict),
           "paired": report.paired_all([r for v in runs.values() for r in v]),
           "runs": [r for k in sorted(runs) for r in runs[k]]}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def status_text(r):
    if "error" in r:
        return r["error"][:200]
    return (f"peak {fmt_gib(r['peak_device_bytes']).strip()} GiB, "
            f"{r['throughput']:.1f} {r['throughput_unit']}")


def run_round(args, rnd, jobs, started, runs, progress, on_result):
    """The jobs of one round, each in its subprocess, within the budget."""
    for mode, workloads in jobs:
        left = args.budget - (time.time() - started)
        if left < START_S:
            progress["skipped_jobs"].append({"round": rnd + 1, "mode": mode,
                                             "workloads": workloads})
            print(f"[bench] round {rnd + 1}: {mode} / {','.join(workloads)}: skipped, "
                  f"the {args.budget} s budget is spent", flush=True)
            continue
        print(f"[bench] round {rnd + 1}: {mode} / {','.join(workloads)} ...", flush=True)
        timeout = min(args.timeout * len(workloads) + START_S, left)
        for r in run_job(args, mode, workloads, timeout):
            r["round"] = rnd + 1
            runs.setdefault((r["workload"], mode), []).append(r)
            print(f"[bench] round {rnd + 1}: {r['workload']} / {mode}: {status_text(r)} "
                  f"({r['subprocess_s']:.0f} s for the process)", flush=True)
        on_result()


def skipped_rows(progress, runs):
    """An error row for each (workload, mode) the budget left with no run."""
    for job in progress["skipped_jobs"]:
        for w in job["workloads"]:
            if (w, job["mode"]) not in runs:
                runs[(w, job["mode"])] = [{"workload": w, "mode": job["mode"], "error":
                                           "skipped: the budget was spent"}]


def parent(args):
    started = time.time()
    runs, state = {}, {"results": {}, "verdict": {}}
    modes = list(args.modes) + [variant_name(c) for c in args.variant]
    plan = schedule(args.workloads, modes, args.rounds, args.per_process == "round")
    progress = {"rounds_done": 0, "rounds_skipped": 0, "round_s": [], "skipped_jobs": []}

    def update():
        state["results"] = {key: aggregate(v) for key, v in runs.items()}
        state["verdict"] = compare(state["results"])
        if args.out:
            write(args.out, args, runs, state["results"], state["verdict"], started, progress)

    for rnd, jobs in enumerate(plan):
        if not report.round_fits(args.budget - (time.time() - started), progress["round_s"]):
            progress["rounds_skipped"] = len(plan) - rnd
            print(f"[bench] rounds {rnd + 1}-{len(plan)} skipped: they would not fit in the "
                  f"{args.budget} s budget", flush=True)
            break
        t0 = time.time()
        run_round(args, rnd, jobs, started, runs, progress, update)
        progress["round_s"].append(time.time() - t0)
        progress["rounds_done"] = rnd + 1
    skipped_rows(progress, runs)
    update()
    results, verdict = state["results"], state["verdict"]
    print()
    print(table(results, verdict))
    print()
    print("\n".join(report.summary(results, verdict)))
    print("\n".join(report.paired_lines([r for v in runs.values() for r in v])))
    print()
    print(markdown(results, verdict))
    print(f"\n[bench] {time.time() - started:.0f} s in all", flush=True)
    bad = [r for v in runs.values() for r in v if "error" in r or "process_error" in r]
    return 1 if bad else 0


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--workloads", nargs="+", default=["llama", "gpt2", "graph"],
                    choices=WORKLOADS,
                    help="default: llama gpt2 graph; the figure counts " + " ".join(FAMILIES))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES + ("xseg-native",),
                    help="xseg-native: xseg.install(native=True) (the native module, issue 16)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--passes", type=int, default=3,
                    help="passes over each schedule; the first warms up; the throughput "
                         "counts the fastest run of each call (step) in the later ones")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every (workload, mode), interleaved in rotating order; "
                         "the table shows medians with min..max and spread")
    ap.add_argument("--quick", action="store_true",
                    help="smaller models and schedules: a few seconds of GPU work each")
    ap.add_argument("--per-process", choices=("workload", "round"), default="workload",
                    help="one subprocess per (workload, mode, round), or one per (mode, "
                         "round) running every workload in turn (saves the start-up)")
    ap.add_argument("--trace-dir", default=None,
                    help="xseg mode: record every allocation (conf history) and write it "
                         "there as an xseg-trace v1 file, for xseg-replay")
    ap.add_argument("--timeout", type=int, default=240,
                    help="seconds per workload; a subprocess may take this times its "
                         f"workloads plus {START_S} s")
    ap.add_argument("--budget", type=int, default=540,
                    help="seconds for the whole run: a round starts only if the longest "
                         "round so far (after the first) fits in what is left; a job "
                         f"starts only with {START_S} s left")
    ap.add_argument("--xseg-conf", default=None, help="conf for xseg.install()")
    ap.add_argument("--variant", action="append", default=[], metavar="CONF",
                    help="also run xseg with this conf, as the mode xseg[CONF] in the same "
                         "rotation (repeatable)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.trace_dir and args.per_process == "round" and not args.child:
        ap.error("--trace-dir records one workload per process: use --per-process workload")
    return args


def main(argv=None):
    args = parse(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
