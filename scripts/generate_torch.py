"""
KV-cache generation in PyTorch, the baseline for scripts/bench_generate.sh: scripts/train_gpt2.py's GPT-2, loaded from
the same llm.c model file, bf16 weights, F.scaled_dot_product_attention, eager mode. Timed as generate_gpt2cu times
itself: the prefill (the prompts' forward and the first new token on the host), then n - 1 decode steps, each reading
its B new tokens back to the host.

  python3 scripts/generate_torch.py --init model.bin -b 64 -n 1000 --prompt_len 24 [-k 40 -T 0.8 | --greedy]
  python3 scripts/generate_torch.py --init model.bin --verify     KV cache vs full recompute, greedy, fp32

The prompt is the first --prompt_len tokens of the tiny Shakespeare val shard (or --prompt_ids "1,2,3"), the same for
every sequence: the timing depends on the lengths, not on the text. Sampling: top-k (0: all) and temperature through
torch.multinomial with a seeded generator, or argmax. Prints one RESULT line in generate_gpt2cu's format.
"""

import argparse
import contextlib
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt2 import read_model  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VAL = os.path.join(REPO_ROOT, "dev", "data", "tinyshakespeare", "tiny_shakespeare_val.bin")


class KVCache:
    """Per layer K and V, (B, NH, Tmax, HS) each, filled up to self.length."""

    def __init__(self, cfg, B, Tmax, device, dtype):
        hs = cfg.n_embd // cfg.n_head
        shape = (cfg.n_layer, B, cfg.n_head, Tmax, hs)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0


# SDPA's backends for generation. PyTorch's default order tries cuDNN first on Hopper, and cuDNN builds a new execution
# plan for every new key length: milliseconds per call, one per layer and step. FlashAttention-2 (then the
# memory-efficient kernel) takes any length without one; --sdpa auto keeps PyTorch's choice.
SDPA_CHOICES = {"flash": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], "auto": None}


def attention_cached(attn, x, cache, layer, start):
    """The model's CausalSelfAttention on the T new positions start..start+T-1, their k, v appended to the cache."""
    B, T, C = x.size()
    nh = attn.n_head
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in (q, k, v))
    cache.k[layer, :, :, start:start + T] = k
    cache.v[layer, :, :, start:start + T] = v
    if start == 0:   # prefill: causal self-attention over the prompt
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:            # decode (T = 1): every cached key is visible
        y = F.scaled_dot_product_attention(q, cache.k[layer, :, :, :start + T], cache.v[layer, :, :, :start + T])
    return attn.c_proj(y.transpose(1, 2).reshape(B, T, C))


@torch.no_grad()
def forward_cached(model, idx, cache):
    """Logits (B, V) of the last of the new tokens idx (B, T), which continue every sequence at cache.length."""
    start = cache.length
    T = idx.size(1)
    x = model.wte(idx) + model.wpe(torch.arange(start, start + T, device=idx.device))
    for layer, block in enumerate(model.h):
        x = x + attention_cached(block.attn, block.ln_1(x), cache, layer, start)
        x = x + block.mlp(block.ln_2(x))
    cache.length = start + T
    x = model.ln_f(x[:, -1])
    return F.linear(x, model.wte.weight)[:, :model.cfg.vocab_size]


def sample(logits, top_k, temperature, greedy, gen):
    if greedy:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if 0 < top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen).squeeze(-1)


def generate(model, prompt, n, args, gen):
    """n new tokens for each row of prompt (B, Tp); returns (tokens (B, n) on the host, prefill s, decode s)."""
    B, Tp = prompt.shape
    sync = torch.cuda.synchronize if prompt.is_cuda else (lambda: None)
    cache = KVCache(model.cfg, B, Tp + n, prompt.device, next(model.parameters()).dtype)
    out = []
    sync()
    t0 = time.perf_counter()
    tok = sample(forward_cached(model, prompt, cache), args.top_k, args.temperature, args.greedy, gen)
    out.append(tok.cpu())
    t1 = time.perf_counter()
    for _ in range(n - 1):
        tok = sample(forward_cached(model, tok[:, None], cache), args.top_k, args.temperature, args.greedy, gen)
        out.append(tok.cpu())   # the host reads every step's tokens, as generate_gpt2cu does
    t2 = time.perf_counter()
    return torch.stack(out, dim=1), t1 - t0, t2 - t1


@torch.no_grad()
def generate_recompute(model, prompt, n):
    """Greedy without a cache: the whole forward again for every new token."""
    x = prompt
    for _ in range(n):
        logits, _ = model(x)
        x = torch.cat([x, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return x[:, prompt.size(1):].cpu()


def main():
    p = argparse.ArgumentParser(description="KV-cache generation in PyTorch (see the header of this file)")
    p.add_argument("--init", required=True, help="llm.c model file")
    p.add_argument("-b", dest="batch_size", type=int, default=1)
    p.add_argument("-n", dest="new_tokens", type=int, default=256)
    p.add_argument("--prompt_len", type=int, default=24)
    p.add_argument("--prompt_ids", default=None, help="comma-separated token ids (default: the val shard's first tokens)")
    p.add_argument("-k", dest="top_k", type=int, default=40)
    p.add_argument("-T", dest="temperature", type=float, default=0.8)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--warmup", type=int, default=1, help="1: one untimed prefill + two decode steps first")
    p.add_argument("--device", default=None, help="cuda if available, else cpu")
    p.add_argument("--sdpa", choices=sorted(SDPA_CHOICES), default="flash",
                   help="flash: FlashAttention-2, else memory-efficient (default); auto: PyTorch's order (cuDNN first)")
    p.add_argument("--verify", action="store_true", help="greedy KV cache vs full recompute in fp32 (8 tokens); exit 1 if they differ")
    args = p.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    if args.prompt_ids:
        prompt_ids = [int(t) for t in args.prompt_ids.split(",")]
    else:
        tokens = np.fromfile(DEFAULT_VAL, dtype="<u2", offset=1024)
        prompt_ids = tokens[:args.prompt_len].astype(np.int64).tolist()
    model = read_model(args.init).eval()
    if len(prompt_ids) + args.new_tokens > model.cfg.block_size:
        sys.exit(f"error: prompt {len(prompt_ids)} + {args.new_tokens} new tokens > {model.cfg.block_size} positions")
    prompt = torch.tensor(prompt_ids, device=device).repeat(args.batch_size, 1)
    gen = torch.Generator(device=device).manual_seed(args.seed)

    if args.verify:
        model.to(device)
        args.greedy = True
        n = min(args.new_tokens, 8)
        cached, _, _ = generate(model, prompt, n, args, gen)
        full = generate_recompute(model, prompt, n)
        same = torch.equal(cached, full)
        print(f"KV cache {cached[0].tolist()}\nrecompute {full[0].tolist()}\n{'identical' if same else 'DIFFERENT'}")
        sys.exit(0 if same else 1)

    model.to(device=device, dtype=torch.bfloat16)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"PyTorch {torch.__version__} on {name}: B={args.batch_size} prompt {len(prompt_ids)} tokens, {args.new_tokens} new, "
          f"{'greedy' if args.greedy else f'top-k {args.top_k} temperature {args.temperature}'}, bf16, SDPA ({args.sdpa}), KV cache, eager")
    backends = SDPA_CHOICES[args.sdpa]
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        if args.warmup:
            generate(model, prompt, min(args.new_tokens, 3), args, gen)
        tokens, prefill_s, decode_s = generate(model, prompt, args.new_tokens, args, gen)
    B, n = args.batch_size, args.new_tokens
    decode_tok_s = B * (n - 1) / decode_s if n > 1 else 0.0
    print(f"prefill: {B * len(prompt_ids)} prompt tokens in {1e3 * prefill_s:.2f} ms")
    print(f"decode: {n - 1} steps x B={B} in {1e3 * decode_s:.2f} ms, {1e3 * decode_s / max(n - 1, 1):.3f} ms/step, "
          f"{decode_tok_s:.0f} tok/s")
    print(f"RESULT generate torch B={B} prompt={len(prompt_ids)} new={n} prefill_ms={1e3 * prefill_s:.3f} "
          f"decode_ms={1e3 * decode_s:.3f} decode_tok_s={decode_tok_s:.1f} total_tok_s={B * n / (prefill_s + decode_s):.1f}")


if __name__ == "__main__":
    main()
