"""corpus_workloads.py: the workloads of capture_corpus.py, one function
run_<name>(torch, seed) each.  Each builds its model on the GPU from a
config (random weights, nothing downloaded), runs a few seconds of real
work and returns a dict of facts; its "_keep" entry holds what stays live
until the allocator history is read (weights, optimizer state, KV pool), so
a trace ends like the process would.  Needs torch and a CUDA device, and
transformers for the Hugging Face models (not for serve_paged_kv).

Shapes and schedules are constants; token ids, images and padding come
from the seed: every run asks for the same sizes in the same order (MoE
routing aside, which follows the values)."""
import random


# ------------------------------------------------------------------ common

def hf():
    import transformers
    return transformers


# Keys a config class may refuse (strict dataclass configs of transformers
# 5.x): dropped on a second try; none of them changes an allocation.
OPTIONAL_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "use_cache",
                 "router_aux_loss_coef")


def make_config(cls, attn, **kw):
    """A config with this attention implementation (transformers 4.x/5.x)."""
    first = None
    for drop in ((), OPTIONAL_KEYS):
        args = {k: v for k, v in kw.items() if k not in drop}
        try:
            return cls(attn_implementation=attn, **args)
        except Exception as e:  # noqa: BLE001 (older or stricter config classes)
            first = first or e
        try:
            config = cls(**args)
        except Exception as e:  # noqa: BLE001
            first = first or e
            continue
        try:
            config._attn_implementation = attn
        except Exception:  # noqa: BLE001 (then the library's default)
            pass
        return config
    raise first


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


def token_ids(torch, seed, shape, vocab, low=3, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, shape, generator=g).to(device)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def llama_kw(vocab, hidden, inter, layers, heads, kv_heads, max_pos):
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, max_position_embeddings=max_pos,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def optimizer_step(torch, loss, opt, params, clip=1.0):
    """Backward, gradient clipping (unless clip is None), the optimizer's
    step and zero_grad; returns the loss read back (logging)."""
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return round(float(loss.detach()), 4)


def train_steps(torch, model, opt, steps, seed, vocab, params, **fwd):
    """Causal-LM steps under bf16 autocast: forward with labels, backward,
    clip, AdamW step, zero_grad; the loss read back each step (logging)."""
    losses = []
    for i, (b, s) in enumerate(steps):
        ids = token_ids(torch, seed + i, (b, s), vocab)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, **fwd).loss
        losses.append(optimizer_step(torch, loss, opt, params))
        del loss, ids
    return losses


def adamw(torch, params, wd=0.1):
    return torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=wd)


# ------------------------------------------- serving, growing KV cache (HF)

# (batch, prompt length, new tokens); b * prompt <= 8192 (the prefill)
SERVE_CALLS = ((1, 48, 32), (8, 512, 24), (16, 128, 32), (4, 2048, 16), (24, 256, 24),
               (2, 1024, 48), (32, 64, 32), (12, 640, 20), (6, 1200, 24), (20, 384, 16))


def left_padded(torch, rng, seed, b, plen, vocab):
    """Prompts of different lengths, left-padded (pad 0) as a server batches
    them; row 0 is full length."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (b, plen), generator=g)
    mask = torch.ones(b, plen, dtype=torch.long)
    for r in range(1, b):
        pad = rng.randrange(0, plen // 2 + 1)
        ids[r, :pad] = 0
        mask[r, :pad] = 0
    return ids.cuda(), mask.cuda()


def run_serve_dynamic_kv(torch, seed):
    tf = hf()
    kw = llama_kw(151936, 1536, 8960, 28, 12, 2, 32768)
    kw["tie_word_embeddings"] = True
    cfg = make_config(tf.Qwen2Config, "sdpa", **kw)
    model = build(torch, tf.Qwen2ForCausalLM, cfg, torch.bfloat16, seed).eval()
    rng, tokens = random.Random(seed), 0
    with torch.no_grad():
        for i, (b, plen, new) in enumerate(SERVE_CALLS):
            ids, mask = left_padded(torch, rng, seed + i, b, plen, 151936)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
            tokens += int(out.shape[0]) * (int(out.shape[1]) - plen)
            del out, ids, mask
    return {"generated_tokens": tokens, "calls": len(SERVE_CALLS), "params": n_params(model),
            "_keep": model}


# ------------------------------------ serving, paged KV cache (vLLM-like)

PAGED = dict(hidden=2048, inter=5632, layers=22, heads=32, kv_heads=4, vocab=32000,
             block=16, blocks=8192, max_running=32, requests=48, max_steps=400,
             prefills_per_step=2, prompt=(16, 1536), new=(16, 160))


class PagedLM:
    """A Llama-shaped decoder of plain tensors whose KV cache is a pool of
    fixed-size blocks per layer, addressed through block tables.  (`dev`
    and `dtype`: cuda and bf16 here; the unit test runs a tiny one on the
    CPU in fp32.)"""

    def __init__(self, torch, seed, d, dev="cuda", dtype=None):
        self.torch, self.F, self.d, self.dev = torch, torch.nn.functional, d, dev
        dtype = self.dtype = dtype or torch.bfloat16
        self.hd = d["hidden"] // d["heads"]
        g = torch.Generator(device=dev)
        g.manual_seed(seed)

        def w(rows, cols):
            return torch.randn(rows, cols, device=dev, dtype=dtype,
                               generator=g).mul_(0.02)

        def ones():
            return torch.ones(d["hidden"], device=dev, dtype=dtype)

        qkv = (d["heads"] + 2 * d["kv_heads"]) * self.hd
        self.embed = w(d["vocab"], d["hidden"])
        self.layers = [dict(n1=ones(), wqkv=w(d["hidden"], qkv), wo=w(d["hidden"], d["hidden"]),
                            n2=ones(), wgu=w(d["hidden"], 2 * d["inter"]),
                            wd=w(d["inter"], d["hidden"])) for _ in range(d["layers"])]
        self.norm, self.head = ones(), w(d["hidden"], d["vocab"])
        shape = (d["blocks"], d["block"], d["kv_heads"], self.hd)
        self.k_cache = [torch.zeros(shape, device=dev, dtype=dtype)
                        for _ in range(d["layers"])]
        self.v_cache = [torch.zeros(shape, device=dev, dtype=dtype)
                        for _ in range(d["layers"])]
        self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.hd, 2, device=dev,
                                                        dtype=torch.float32) / self.hd))

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        return xf.to(x.dtype) * w

    def rope_tables(self, positions):
        f = positions.float()[:, None] * self.inv_freq[None, :]
        return f.cos().to(self.dtype)[:, None, :], f.sin().to(self.dtype)[:, None, :]

    def rope(self, x, cos, sin):
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def layer(self, i, x, cos, sin, slots, attend):
        L, d, hd = self.layers[i], self.d, self.hd
        t = x.shape[0]
        h = self.rmsnorm(x, L["n1"])
        q, k, v = (h @ L["wqkv"]).split([d["heads"] * hd, d["kv_heads"] * hd,
                                         d["kv_heads"] * hd], dim=-1)
        q = self.rope(q.reshape(t, d["heads"], hd), cos, sin)
        k = self.rope(k.reshape(t, d["kv_heads"], hd), cos, sin)
        v = v.reshape(t, d["kv_heads"], hd)
        self.k_cache[i].view(-1, d["kv_heads"], hd).index_copy_(0, slots, k)
        self.v_cache[i].view(-1, d["kv_heads"], hd).index_copy_(0, slots, v)
        x = x + attend(i, q, k, v) @ L["wo"]
        g, u = (self.rmsnorm(x, L["n2"]) @ L["wgu"]).chunk(2, dim=-1)
        return x + (self.F.silu(g) * u) @ L["wd"]

    def attend_prefill(self, i, q, k, v):
        """One sequence's causal attention over its own tokens."""
        rep, t = self.d["heads"] // self.d["kv_heads"], q.shape[0]
        kh = k.repeat_interleave(rep, dim=1).transpose(0, 1)[None]
        vh = v.repeat_interleave(rep, dim=1).transpose(0, 1)[None]
        o = self.F.scaled_dot_product_attention(q.transpose(0, 1)[None], kh, vh, is_causal=True)
        return o[0].transpose(0, 1).reshape(t, -1)

    def decode_attend(self, tables, ctx_lens):
        """Attention of one new token per sequence over its blocks."""
        torch, d = self.torch, self.d
        b, nblk = tables.shape
        s, rep = nblk * d["block"], d["heads"] // d["kv_heads"]
        mask = (torch.arange(s, device=self.dev)[None, :] < ctx_lens[:, None])[:, None, None, :]

        def attend(i, q, k, v):
            kc = self.k_cache[i][tables].reshape(b, s, d["kv_heads"], self.hd)
            vc = self.v_cache[i][tables].reshape(b, s, d["kv_heads"], self.hd)
            kc = kc.repeat_interleave(rep, dim=2).transpose(1, 2)
            vc = vc.repeat_interleave(rep, dim=2).transpose(1, 2)
            o = self.F.scaled_dot_product_attention(q[:, :, None, :], kc, vc, attn_mask=mask)
            return o.reshape(b, -1)
        return attend

    def forward(self, ids, positions, slots, attend):
        x = self.embed[ids]
        cos, sin = self.rope_tables(positions)
        for i in range(self.d["layers"]):
            x = self.layer(i, x, cos, sin, slots, attend)
        return x

    def next_tokens(self, x):
        return (self.rmsnorm(x, self.norm) @ self.head).float().argmax(-1).tolist()


class PagedServer:
    """Continuous batching over a block pool: admit, prefill, decode."""

    def __init__(self, torch, lm, seed):
        self.torch, self.lm, self.d, self.seed = torch, lm, lm.d, seed
        rng = random.Random(seed)
        self.reqs = [(rng.randint(*self.d["prompt"]), rng.randint(*self.d["new"]))
                     for _ in range(self.d["requests"])]
        self.free = list(range(self.d["blocks"]))[::-1]  # pop() hands out block 0 first
        self.waiting, self.running, self.done = list(range(len(self.reqs))), [], []
        self.stats = {"steps": 0, "prefills": 0, "decoded_tokens": 0, "max_batch": 0}

    def cuda(self, values):
        return self.torch.tensor(values, dtype=self.torch.int64).to(self.lm.dev)

    def slot(self, r, pos):
        return r["blocks"][pos // self.d["block"]] * self.d["block"] + pos % self.d["block"]

    def admit(self):
        bs = self.d["block"]
        for _ in range(self.d["prefills_per_step"]):
            if not self.waiting or len(self.running) >= self.d["max_running"]:
                return
            plen, out_len = self.reqs[self.waiting[0]]
            if (plen + bs) // bs + 1 > len(self.free):
                return
            rid = self.waiting.pop(0)
            r = {"id": rid, "ctx": plen, "left": out_len,
                 "blocks": [self.free.pop() for _ in range((plen + bs - 1) // bs)]}
            ids = token_ids(self.torch, self.seed + 1000 + rid, (plen,), self.d["vocab"],
                            device=self.lm.dev)
            x = self.lm.forward(ids, self.torch.arange(plen, device=self.lm.dev),
                                self.cuda([self.slot(r, p) for p in range(plen)]),
                                self.lm.attend_prefill)
            r["next"] = self.lm.next_tokens(x[-1:])[0]
            r["left"], r["out"] = r["left"] - 1, [r["next"]]
            self.running.append(r)
            self.stats["prefills"] += 1
            del x, ids

    def decode(self):
        run, bs = self.running, self.d["block"]
        for r in run:
            if r["ctx"] % bs == 0:
                r["blocks"].append(self.free.pop())
        nblk = max(len(r["blocks"]) for r in run)
        tables = self.cuda([r["blocks"] + [0] * (nblk - len(r["blocks"])) for r in run])
        attend = self.lm.decode_attend(tables, self.cuda([r["ctx"] + 1 for r in run]))
        x = self.lm.forward(self.cuda([r["next"] for r in run]), self.cuda([r["ctx"] for r in run]),
                            self.cuda([self.slot(r, r["ctx"]) for r in run]), attend)
        for r, t in zip(run, self.lm.next_tokens(x)):
            r["next"], r["ctx"], r["left"] = t, r["ctx"] + 1, r["left"] - 1
            r["out"].append(t)
        self.stats["decoded_tokens"] += len(run)
        self.stats["max_batch"] = max(self.stats["max_batch"], len(run))
        for r in run:
            if r["left"] <= 0:  # finished: its blocks go back to the pool
                self.free.extend(reversed(r["blocks"]))
                self.done.append({"id": r["id"], "out": r["out"]})
        self.running = [r for r in run if r["left"] > 0]

    def serve(self):
        while (self.waiting or self.running) and self.stats["steps"] < self.d["max_steps"]:
            self.admit()
            if self.running:
                self.decode()
            self.stats["steps"] += 1
        self.stats["unfinished"] = len(self.waiting) + len(self.running)
        return self.stats


def run_serve_paged_kv(torch, seed):
    torch.manual_seed(seed)
    lm = PagedLM(torch, seed, PAGED)
    with torch.no_grad():
        stats = PagedServer(torch, lm, seed).serve()
    stats["kv_pool_bytes"] = sum(c.numel() * c.element_size() for c in lm.k_cache + lm.v_cache)
    stats["_keep"] = lm
    return stats


# ----------------------------------------------------- embedding (encoder)

def bert_batch(torch, rng, seed, vocab):
    """A batch of 1-256 texts of 8-512 tokens, padded to the longest."""
    b = rng.choice((1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256))
    n = rng.randint(8, 512)
    while b * n > 65536:
        n //= 2
    lens = [n] + [rng.randint(max(1, n // 4), n) for _ in range(b - 1)]
    ids = torch.randint(1000, vocab, (b, n), generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(b, n, dtype=torch.long)
    for r, k in enumerate(lens):
        mask[r, :k] = 1
    return (ids * mask).cuda(), mask.cuda()


def run_embed_bert(torch, seed):
    tf, F = hf(), torch.nn.functional
    cfg = make_config(tf.BertConfig, "sdpa", vocab_size=30522, hidden_size=1024,
                      num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                      max_position_embeddings=512)
    model = build(torch, tf.BertModel, cfg, torch.bfloat16, seed).eval()
    rng, texts, tokens = random.Random(seed), 0, 0
    with torch.no_grad():
        for i in range(64):
            ids, mask = bert_batch(torch, rng, seed + i, 30522)
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            emb = F.normalize((h * m).sum(1).float() / m.sum(1).float(), dim=-1).cpu()
            texts, tokens = texts + emb.shape[0], tokens + ids.numel()
            del h, m, ids, mask
    return {"texts": texts, "padded_tokens": tokens, "params": n_params(model), "_keep": model}


# ------------------------------------------------ dense LM training, AdamW

DENSE_STEPS = ((8, 512), (4, 1024), (16, 256), (2, 2048), (6, 768), (12, 384), (3, 1536),
               (8, 1024), (1, 4096), (10, 640), (5, 896), (16, 512), (4, 2048), (7, 1024))


def run_train_dense_adamw(torch, seed):
    tf = hf()
    cfg = make_config(tf.LlamaConfig, "sdpa", **llama_kw(32000, 1536, 4096, 16, 12, 4, 4096))
    model = build(torch, tf.LlamaForCausalLM, cfg, torch.float32, seed).train()
    params = list(model.parameters())
    opt = adamw(torch, params)
    losses = train_steps(torch, model, opt, DENSE_STEPS, seed, 32000, params)
    return {"losses": losses, "params": n_params(model), "_keep": (model, opt)}


# ------------------------------------------------------------ MoE training

MOE_STEPS = ((4, 512), (8, 256), (2, 1024), (1, 2048), (6, 384), (3, 768), (8, 512),
             (2, 2048), (12, 256), (4, 1024), (5, 640), (1, 4096))


def eager_experts(model):
    """The per-expert loop (token counts follow the routing), where this
    transformers has a choice of experts implementation."""
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception:  # noqa: BLE001 (keep the default)
            pass
    return getattr(model.config, "_experts_implementation", "eager (no choice)")


def run_train_moe_mixtral(torch, seed):
    tf = hf()
    kw = llama_kw(32000, 1024, 2816, 8, 16, 4, 4096)
    kw.update(num_local_experts=8, num_experts_per_tok=2, output_router_logits=True,
              router_aux_loss_coef=0.02)
    cfg = make_config(tf.MixtralConfig, "sdpa", **kw)
    model = build(torch, tf.MixtralForCausalLM, cfg, torch.float32, seed).train()
    impl = eager_experts(model)
    params = list(model.parameters())
    opt = adamw(torch, params)
    losses = train_steps(torch, model, opt, MOE_STEPS, seed, 32000, params)
    return {"losses": losses, "params": n_params(model), "experts_implementation": str(impl),
            "_keep": (model, opt)}


# ------------------------------------------ vision, variable resolution

# (batch, resolution): 8-16k patches a step
VIT_STEPS = ((64, 224), (128, 160), (32, 320), (96, 192), (48, 256), (24, 384), (128, 128),
             (40, 288), (16, 448), (80, 176), (32, 352), (64, 224))


def run_train_vit_varres(torch, seed):
    tf, F = hf(), torch.nn.functional
    cfg = make_config(tf.ViTConfig, "sdpa", hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, image_size=224,
                      patch_size=16, num_channels=3)
    vit = build(torch, tf.ViTModel, cfg, torch.float32, seed).train()
    head = torch.nn.Linear(768, 1000, device="cuda")
    params = list(vit.parameters()) + list(head.parameters())
    opt = adamw(torch, params, wd=0.05)
    losses = []
    for i, (b, res) in enumerate(VIT_STEPS):
        g = torch.Generator(device="cuda")
        g.manual_seed(seed + i)
        x = torch.randn(b, 3, res, res, device="cuda", generator=g)
        y = torch.randint(0, 1000, (b,), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = vit(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state[:, 0]
            loss = F.cross_entropy(head(h).float(), y)
        losses.append(optimizer_step(torch, loss, opt, params))
        del x, y, h, loss
    return {"losses": losses, "params": n_params(vit), "_keep": (vit, head, opt)}


# -------------------------------------------------------- LoRA fine-tuning

LORA_STEPS = ((4, 1024), (8, 512), (2, 2048), (1, 4096), (6, 768), (3, 1536), (16, 256),
              (2, 1792), (4, 896), (1, 3072), (8, 640), (5, 1024))


def add_lora(torch, model, r=16, alpha=32, dropout=0.05,
             names=("q_proj", "k_proj", "v_proj", "o_proj")):
    """Freezes the model and wraps its attention projections in low-rank
    adapters (A: r x in, Kaiming; B: out x r, zeros; fp32); returns the
    adapters' parameters."""
    nn = torch.nn

    class LoRALinear(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base, self.scale, self.drop = base, alpha / r, nn.Dropout(dropout)
            self.lora_a = nn.Parameter(torch.empty(r, base.in_features, device="cuda"))
            self.lora_b = nn.Parameter(torch.zeros(base.out_features, r, device="cuda"))
            nn.init.kaiming_uniform_(self.lora_a, a=5 ** 0.5)

        def forward(self, x):
            low = nn.functional.linear(nn.functional.linear(self.drop(x), self.lora_a),
                                       self.lora_b)
            return self.base(x) + low * self.scale

    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        for name in names:
            setattr(layer.self_attn, name, LoRALinear(getattr(layer.self_attn, name)))
    return [p for p in model.parameters() if p.requires_grad]


def run_finetune_lora(torch, seed):
    tf = hf()
    cfg = make_config(tf.LlamaConfig, "sdpa", **llama_kw(32000, 2560, 6912, 20, 20, 4, 4096))
    model = build(torch, tf.LlamaForCausalLM, cfg, torch.bfloat16, seed).train()
    params = add_lora(torch, model)
    opt = adamw(torch, params, wd=0.0)
    losses = train_steps(torch, model, opt, LORA_STEPS, seed, 32000, params)
    return {"losses": losses, "params": n_params(model),
            "trainable_params": sum(p.numel() for p in params), "_keep": (model, opt)}


# -------------------------------------------------- activation checkpointing

CKPT_STEPS = ((8, 2048), (4, 4096), (2, 8192), (1, 16384), (16, 1024), (6, 2048), (3, 4096),
              (12, 1024), (2, 6144), (24, 512))


def run_train_ckpt_qwen2(torch, seed):
    tf = hf()
    kw = llama_kw(32000, 1536, 6144, 16, 12, 2, 16384)
    kw["use_cache"] = False
    cfg = make_config(tf.Qwen2Config, "sdpa", **kw)
    model = build(torch, tf.Qwen2ForCausalLM, cfg, torch.float32, seed).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    on = bool(getattr(model, "is_gradient_checkpointing", False)) or any(
        getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    if not on:
        raise RuntimeError("gradient checkpointing did not turn on")
    params = list(model.parameters())
    opt = adamw(torch, params)
    losses = train_steps(torch, model, opt, CKPT_STEPS, seed, 32000, params, use_cache=False)
    return {"losses": losses, "params": n_params(model), "gradient_checkpointing": on,
            "_keep": (model, opt)}


# ---------------------------------------------------- long-context prefill

# (batch, prompt length, decode steps after it)
PREFILLS = ((1, 8192, 8), (4, 16384, 8), (1, 32768, 8), (2, 24576, 6), (1, 65536, 6),
            (1, 98304, 4))


def run_prefill_long(torch, seed):
    tf = hf()
    cfg = make_config(tf.LlamaConfig, "sdpa", **llama_kw(32000, 2048, 8192, 16, 32, 8, 131072))
    model = build(torch, tf.LlamaForCausalLM, cfg, torch.bfloat16, seed).eval()
    base, head, tokens = model.model, model.lm_head, 0
    with torch.no_grad():
        for i, (b, n, steps) in enumerate(PREFILLS):
            ids = token_ids(torch, seed + i, (b, n), 32000)
            out = base(input_ids=ids, use_cache=True)  # no mask: causal, no padding
            cache, tok = out.past_key_values, head(out.last_hidden_state[:, -1:]).argmax(-1)
            del out, ids
            for _ in range(steps):
                out = base(input_ids=tok, past_key_values=cache, use_cache=True)
                cache, tok = out.past_key_values, head(out.last_hidden_state[:, -1:]).argmax(-1)
                del out
            tokens += b * (n + steps)
            del cache, tok
    return {"tokens": tokens, "params": n_params(model), "_keep": model}
