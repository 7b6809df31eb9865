"""heldout_workloads.py: the held-out workloads of capture_corpus.py
(`--set heldout`), one function run_<name>(torch, seed) each, as in
corpus_workloads.py.  They exist to check that xseg was not tuned to the
corpus: no default of xseg was chosen on them, and their figures are
reported as they come (docs/benchmarks.md, "Held-out workloads").  Each
differs from the corpus in model family and in an allocation pattern the
corpus lacks: an encoder-decoder, beam search (the KV cache reordered
every step), convolutions with cuDNN's benchmark mode (workspaces of every
size it tries), and inputs copied on a second stream (record_stream).

Needs torch, a CUDA device and transformers; random weights from configs,
nothing downloaded."""
import random

from corpus_workloads import (adamw, build, hf, left_padded, make_config, n_params,
                              optimizer_step, token_ids)

# (name, what it is), in capture order; capture_corpus.py lists them.
WORKLOADS = [
    ("heldout_t5_train", "T5-v1.1-base-shaped encoder-decoder (768 hidden, 12+12 layers, "
     "gated GELU, relative position bias, eager attention) training 12 steps with AdamW "
     "under bf16 autocast: batch 6-64, source 128-1024 tokens with per-row padding, "
     "targets 32-384 tokens with ignored padding"),
    ("heldout_neox_beam", "Pythia-1.4B-shaped GPT-NeoX decoder (2048 hidden, 24 layers), "
     "bf16, SDPA: 6 beam-search `generate()` calls (2-8 beams, batch 1-8, left-padded "
     "prompts 128-2048, 16-48 new tokens: the KV cache is reordered every step) and 2 "
     "top-p sampling calls with 4-8 sequences per prompt"),
    ("heldout_resnet_cudnn", "ResNet-50 (bottleneck, 25.6 M parameters) training 12 steps, "
     "channels_last, bf16 autocast, SGD with Nesterov momentum, cuDNN benchmark mode on "
     "(every new shape tries algorithms with their workspaces), batch 16-128 at 128-448 px"),
    ("heldout_opt_prefetch", "OPT-350M-shaped decoder (1024 hidden, 24 layers) training 12 "
     "steps with AdamW under bf16 autocast, each batch copied from pinned host memory on a "
     "second CUDA stream ahead of its step (record_stream), batch 2-32, sequence 128-2048, "
     "and a no-grad evaluation on a larger batch every fourth step"),
]


# ------------------------------------------------ encoder-decoder training

# (batch, source length, target length)
T5_STEPS = ((16, 512, 128), (32, 256, 64), (8, 1024, 256), (64, 128, 48), (12, 768, 192),
            (24, 384, 96), (6, 1024, 384), (48, 192, 64), (16, 640, 160), (10, 896, 224),
            (32, 320, 80), (20, 512, 128))


def t5_batch(torch, rng, seed, b, src, tgt, vocab):
    """Sources padded per row (pad 0, mask 0), targets whose tail is -100."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (b, src), generator=g)
    mask = torch.ones(b, src, dtype=torch.long)
    labels = torch.randint(3, vocab, (b, tgt), generator=g)
    for r in range(1, b):
        k = rng.randint(src // 4, src)
        ids[r, k:], mask[r, k:] = 0, 0
        labels[r, rng.randint(tgt // 4, tgt):] = -100
    return ids.cuda(), mask.cuda(), labels.cuda()


def run_heldout_t5_train(torch, seed):
    tf = hf()
    cfg = make_config(tf.T5Config, "eager", vocab_size=32128, d_model=768, d_kv=64, d_ff=2048,
                      num_layers=12, num_decoder_layers=12, num_heads=12,
                      feed_forward_proj="gated-gelu", dropout_rate=0.1,
                      tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0,
                      eos_token_id=1)
    model = build(torch, tf.T5ForConditionalGeneration, cfg, torch.float32, seed).train()
    params = list(model.parameters())
    opt = adamw(torch, params)
    rng, losses = random.Random(seed), []
    for i, (b, src, tgt) in enumerate(T5_STEPS):
        ids, mask, labels = t5_batch(torch, rng, seed + i, b, src, tgt, 32128)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        losses.append(optimizer_step(torch, loss, opt, params))
        del loss, ids, mask, labels
    return {"losses": losses, "params": n_params(model), "_keep": (model, opt)}


# ------------------------------------------------------ beam-search serving

# (batch, prompt length, new tokens, beams)
BEAM_CALLS = ((1, 512, 48, 4), (4, 256, 32, 4), (2, 1024, 24, 8), (8, 128, 40, 4),
              (1, 2048, 16, 4), (6, 384, 32, 2))
# (batch, prompt length, new tokens, sequences per prompt)
SAMPLE_CALLS = ((2, 256, 48, 8), (4, 512, 32, 4))


def beam_generate(model, ids, mask, new, beams):
    """Beam search; where this transformers has moved it out of the core
    library, sampling with as many sequences instead (said in the result)."""
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
              pad_token_id=0)
    try:
        return model.generate(num_beams=beams, do_sample=False, early_stopping=False, **kw), ""
    except Exception as e:  # noqa: BLE001 (the fallback is recorded)
        out = model.generate(do_sample=True, top_p=0.9, num_return_sequences=beams, **kw)
        return out, "%s: %s" % (type(e).__name__, str(e)[:200])


def run_heldout_neox_beam(torch, seed):
    tf = hf()
    cfg = make_config(tf.GPTNeoXConfig, "sdpa", vocab_size=50304, hidden_size=2048,
                      num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192,
                      max_position_embeddings=4096, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = build(torch, tf.GPTNeoXForCausalLM, cfg, torch.bfloat16, seed).eval()
    rng, tokens, fallback = random.Random(seed), 0, ""
    torch.manual_seed(seed)
    with torch.no_grad():
        for i, (b, plen, new, beams) in enumerate(BEAM_CALLS):
            ids, mask = left_padded(torch, rng, seed + i, b, plen, 50304)
            out, why = beam_generate(model, ids, mask, new, beams)
            fallback = fallback or why
            tokens += int(out.shape[0]) * (int(out.shape[1]) - plen)
            del out, ids, mask
        for i, (b, plen, new, k) in enumerate(SAMPLE_CALLS):
            ids, mask = left_padded(torch, rng, seed + 100 + i, b, plen, 50304)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_p=0.9,
                                 temperature=0.8, num_return_sequences=k, max_new_tokens=new,
                                 min_new_tokens=new, pad_token_id=0)
            tokens += int(out.shape[0]) * (int(out.shape[1]) - plen)
            del out, ids, mask
    return {"generated_tokens": tokens, "params": n_params(model),
            "beam_search_fallback": fallback, "_keep": model}


# ------------------------------------------------ convolutions, cuDNN benchmark

# (batch, resolution)
RESNET_STEPS = ((64, 224), (128, 160), (32, 320), (96, 192), (48, 256), (16, 448),
                (128, 128), (40, 288), (24, 384), (80, 176), (64, 224), (32, 352))


def run_heldout_resnet_cudnn(torch, seed):
    tf = hf()
    torch.backends.cudnn.benchmark = True
    cfg = make_config(tf.ResNetConfig, "eager", num_channels=3, embedding_size=64,
                      hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
                      layer_type="bottleneck", hidden_act="relu", num_labels=1000)
    model = build(torch, tf.ResNetForImageClassification, cfg, torch.float32, seed)
    model = model.to(memory_format=torch.channels_last).train()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
    losses = []
    for i, (b, res) in enumerate(RESNET_STEPS):
        g = torch.Generator(device="cuda")
        g.manual_seed(seed + i)
        x = torch.randn(b, 3, res, res, device="cuda", generator=g)
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (b,), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(pixel_values=x, labels=y).loss
        losses.append(optimizer_step(torch, loss, opt, params, clip=None))
        del x, y, loss
    return {"losses": losses, "params": n_params(model), "_keep": (model, opt)}


# ------------------------------------- training with a prefetch stream

# (batch, sequence length)
OPT_STEPS = ((8, 512), (16, 256), (4, 1024), (2, 2048), (32, 128), (12, 384), (6, 768),
             (8, 1024), (24, 192), (3, 1536), (16, 512), (10, 640))


def run_heldout_opt_prefetch(torch, seed):
    tf = hf()
    cfg = make_config(tf.OPTConfig, "sdpa", vocab_size=50272, hidden_size=1024,
                      num_hidden_layers=24, ffn_dim=4096, num_attention_heads=16,
                      max_position_embeddings=2048, word_embed_proj_dim=1024,
                      do_layer_norm_before=True, bos_token_id=2, eos_token_id=2,
                      pad_token_id=1)
    model = build(torch, tf.OPTForCausalLM, cfg, torch.float32, seed).train()
    params = list(model.parameters())
    opt = adamw(torch, params)
    side, main = torch.cuda.Stream(), torch.cuda.current_stream()

    def prefetch(i):
        b, s = OPT_STEPS[i]
        g = torch.Generator().manual_seed(seed + i)
        host = torch.randint(3, 50272, (b, s), generator=g).pin_memory()
        with torch.cuda.stream(side):
            ids = host.to("cuda", non_blocking=True)
            ready = side.record_event()
        return ids, ready, host

    losses, evals, nxt = [], [], prefetch(0)
    for i in range(len(OPT_STEPS)):
        ids, ready, host = nxt
        main.wait_event(ready)
        ids.record_stream(main)  # made on the side stream, used on this one
        if i + 1 < len(OPT_STEPS):
            nxt = prefetch(i + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        losses.append(optimizer_step(torch, loss, opt, params))
        del loss, ids, host
        if i % 4 == 3:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                ev = token_ids(torch, seed + 1000 + i, (32, 512), 50272)
                evals.append(round(float(model(input_ids=ev, labels=ev).loss), 4))
                del ev
    return {"losses": losses, "eval_losses": evals, "params": n_params(model),
            "_keep": (model, opt)}
