"""
GPT-2 in plain PyTorch: the reference that train_gpt2cu and test_gpt2cu are checked against. No download, no HF:
weights come from a seeded random init (GPT-2's scheme) or from an llm.c-format model file.

Model: GPT-2 (learned positions, pre-LayerNorm blocks, tanh GELU, causal attention, wte tied to the classifier).
  -e d12|d24|d36|d48 (llm.c's descriptors: GPT-2's C = 768/1024/1280/1600, NH = C/64), or any size with
  --depth L --channels C --heads NH (default: d12's 12/768/12). Init on the CPU from --seed (so every device writes the
  same weights): Linear/Embedding weights N(0, 0.02), attention and MLP output projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm 1/0.
  wte is stored padded to Vp = 50304 rows (rows >= 50257 zero); logits are computed over Vp and sliced to V before the loss,
  so the padding never changes the math.

1) Reference files for test_gpt2cu (fp32 forward/backward, TF32 off; CPU is fine, ~1 min for d12):
     python scripts/train_gpt2.py --write_reference DIR [-e d12] [-B 4 -T 64] [-i TRAIN_SHARD] [--ref_lr 1e-4]
   (TRAIN_SHARD defaults to dev/data/tinyshakespeare/tiny_shakespeare_train.bin)
   writes, with PREFIX = gpt2_124M for d12, else gpt2_L{L}_C{C}_H{NH}:
     DIR/PREFIX.bin               model, llm.c format version 3 (fp32)
     DIR/PREFIX_bf16.bin          the same weights, version 5 (bf16, round-to-nearest-even)
     DIR/PREFIX_debug_state.bin   magic 20240327, version 2, B, T; int32 x[B·T], int32 y[B·T], fp32 logits[B·T·V] (V = 50257),
                                  fp32 loss, fp32 grads of all 16 tensors in checkpoint order (wte grad padded to Vp with zeros).
                                  The batch is the first one of the train shard: tokens [0, B·T+1).
     DIR/PREFIX_ref_losses.txt    the losses of 10 AdamW steps overfitting that batch (lr 1e-4 or --ref_lr, betas 0.9/0.95,
                                  eps 1e-8, wd 0, global-norm clip 1.0 applied as llm.c does: scale = 1/norm if norm > 1), as
                                  plain text: one loss per line, "%.8f", step 0 first (loss before the step's update; line 1
                                  equals the debug state's loss).
   Caution: from a random init, lr 1e-4 makes these 10 steps chaotic (d12: the loss goes 11.11, 9.11, 7.69, 6.70, 7.13, ...
   and merely rounding the start weights to bf16 moves step 7 by 0.9; bf16 autocast moves step 5 by 2.5). With --ref_lr 1e-5
   the loss falls smoothly 11.11 -> 6.40 and bf16 autocast stays within 0.001 of fp32 at every step.
   Model file header: int32[256], [0] 20240326, [1] 3 or 5, [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp; then wte (Vp,C),
   wpe (maxT,C), ln1w, ln1b, qkvw (L,3C,C), qkvb, attprojw (L,C,C), attprojb, ln2w, ln2b, fcw (L,4C,C), fcb, fcprojw (L,C,4C),
   fcprojb, lnfw, lnfb.

2) Training, for loss-curve comparisons with train_gpt2cu (same init file, same data, same order, no shuffling):
     python scripts/train_gpt2.py --train --init DIR/gpt2_124M_bf16.bin -B 4 -T 1024 -x 50 --loss_out pt_losses.txt
   Batch b (micro-batches counted from 0) is tokens [b·B·T, (b+1)·B·T+1) of the train shard, x/y shifted by one; when
   the next batch would run past the end it starts again at 0 (llm.c's loader on one shard, one process, no permute).
   AdamW as llm.c: lr -l, linear warmup -u steps, cosine to -q × lr at step -x, weight decay -c on 2D tensors only
   (wte, wpe, qkvw, attprojw, fcw, fcprojw), betas 0.9/0.95, eps 1e-8, clip 1.0. bf16 autocast (-dtype), fp32 weights.
   --compile 1 uses torch.compile; attention is F.scaled_dot_product_attention(is_causal=True) (--attn sdpa, the
   default; --sdpa_backend flash makes it fail loudly rather than fall back) or an explicit masked softmax (--attn manual).
   Prints "step N/M | loss L | norm G | lr LR | ms | tok/s" per step and writes the loss file (--loss_out): one line per
   step, "step loss", step counted from 0 (as train_gpt2cu's main.log "s:%d").
   Start from the bf16 file when comparing with the bf16 CUDA build: then both start from identical weights.
   --skip_first_update mirrors an llm.c quirk (lr 0 on step 0; the moments still update) should train_gpt2cu keep it.

3) Throughput (d12, B=64, T=1024, torch.compile, SDPA restricted to the flash backend, bf16, TF32; 10 warmup steps, 30 timed):
     python scripts/train_gpt2.py --bench
   prints the steady tok/s (total tokens / total time of the timed steps), the median step time and peak memory. The model
   is a random d12 init; data are the tiny Shakespeare train batches cycled. If memory is short: -B 32 -d 65536
   (two micro-batches per step, same tokens per step).
"""

import argparse
import contextlib
import math
import os
import struct
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRAIN = os.path.join(REPO_ROOT, "dev", "data", "tinyshakespeare", "tiny_shakespeare_train.bin")

MODEL_MAGIC, MODEL_VERSION_FP32, MODEL_VERSION_BF16 = 20240326, 3, 5
STATE_MAGIC, STATE_VERSION = 20240327, 2
DATA_MAGIC, DATA_VERSION = 20240520, 1
GPT2_DEPTHS = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}  # dN -> (C, NH)
SDPA_BACKENDS = {"auto": None, "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH",
                 "cudnn": "CUDNN_ATTENTION"}

# -----------------------------------------------------------------------------
# model

@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024         # maxT
    vocab_size: int = 50257        # V
    padded_vocab_size: int = 50304  # Vp: V rounded up to a multiple of 128

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg, attn):
        super().__init__()
        self.n_head, self.attn = cfg.n_head, attn
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # qkvw (3C, C): q, k, v, each heads-major
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)      # attprojw
        self.c_proj.residual_proj = True
        if attn == "manual":
            mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, NH, T, HS)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)    # fcw (4C, C)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)  # fcprojw (C, 4C)
        self.c_proj.residual_proj = True

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

class Block(nn.Module):
    def __init__(self, cfg, attn):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg, attn)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

class GPT(nn.Module):
    def __init__(self, cfg, attn="sdpa"):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.padded_vocab_size, cfg.n_embd)  # also the classifier weight
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg, attn) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)

    @torch.no_grad()
    def init_weights(self, seed):
        """GPT-2's scheme, drawn from a CPU generator in module order so the result is the same on every machine."""
        g = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                std = resid_std if getattr(m, "residual_proj", False) else 0.02
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * std)
                m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
        self.wte.weight[self.cfg.vocab_size:].zero_()

    def forward(self, idx, targets=None):
        B, T = idx.size()
        assert T <= self.cfg.block_size, f"T={T} > maxT={self.cfg.block_size}"
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)[..., :self.cfg.vocab_size]  # (B, T, V): padded columns dropped
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def llmc_tensors(self):
        """The 16 tensors in llm.c's checkpoint order as (name, tensor), layer tensors stacked (L, ...)."""
        h = self.h
        stack = lambda get: torch.stack([get(b) for b in h])
        return [
            ("wte", self.wte.weight), ("wpe", self.wpe.weight),
            ("ln1w", stack(lambda b: b.ln_1.weight)), ("ln1b", stack(lambda b: b.ln_1.bias)),
            ("qkvw", stack(lambda b: b.attn.c_attn.weight)), ("qkvb", stack(lambda b: b.attn.c_attn.bias)),
            ("attprojw", stack(lambda b: b.attn.c_proj.weight)), ("attprojb", stack(lambda b: b.attn.c_proj.bias)),
            ("ln2w", stack(lambda b: b.ln_2.weight)), ("ln2b", stack(lambda b: b.ln_2.bias)),
            ("fcw", stack(lambda b: b.mlp.c_fc.weight)), ("fcb", stack(lambda b: b.mlp.c_fc.bias)),
            ("fcprojw", stack(lambda b: b.mlp.c_proj.weight)), ("fcprojb", stack(lambda b: b.mlp.c_proj.bias)),
            ("lnfw", self.ln_f.weight), ("lnfb", self.ln_f.bias),
        ]

    def llmc_params(self):
        """Per tensor of llm.c's order, the list of per-layer Parameters (one entry for wte, wpe, lnfw, lnfb)."""
        h = self.h
        per_layer = lambda get: [get(b) for b in h]
        return [
            [self.wte.weight], [self.wpe.weight],
            per_layer(lambda b: b.ln_1.weight), per_layer(lambda b: b.ln_1.bias),
            per_layer(lambda b: b.attn.c_attn.weight), per_layer(lambda b: b.attn.c_attn.bias),
            per_layer(lambda b: b.attn.c_proj.weight), per_layer(lambda b: b.attn.c_proj.bias),
            per_layer(lambda b: b.ln_2.weight), per_layer(lambda b: b.ln_2.bias),
            per_layer(lambda b: b.mlp.c_fc.weight), per_layer(lambda b: b.mlp.c_fc.bias),
            per_layer(lambda b: b.mlp.c_proj.weight), per_layer(lambda b: b.mlp.c_proj.bias),
            [self.ln_f.weight], [self.ln_f.bias],
        ]

# -----------------------------------------------------------------------------
# llm.c file formats

def header_bytes(values):
    header = np.zeros(256, dtype="<i4")
    header[:len(values)] = values
    return header.tobytes()

def to_bf16_bytes(t):
    return t.detach().cpu().float().to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()

def to_fp32_bytes(t):
    return t.detach().cpu().float().numpy().astype("<f4").tobytes()

def write_model(model, path, dtype):
    cfg = model.cfg
    version = MODEL_VERSION_FP32 if dtype == "float32" else MODEL_VERSION_BF16
    to_bytes = to_fp32_bytes if dtype == "float32" else to_bf16_bytes
    with open(path, "wb") as f:
        f.write(header_bytes([MODEL_MAGIC, version, cfg.block_size, cfg.vocab_size, cfg.n_layer, cfg.n_head,
                              cfg.n_embd, cfg.padded_vocab_size]))
        for _, t in model.llmc_tensors():
            f.write(to_bytes(t))
    print(f"wrote {path} (version {version}, {os.path.getsize(path):,} bytes)")

def read_model(path, attn="sdpa"):
    """Builds a GPT from an llm.c model file (version 3 fp32 or 5 bf16; bf16 values are widened exactly to fp32)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        if len(header) != 256 or header[0] != MODEL_MAGIC or header[1] not in (MODEL_VERSION_FP32, MODEL_VERSION_BF16):
            sys.exit(f"error: {path} is not an llm.c model file (magic/version {header[:2].tolist()})")
        cfg = GPTConfig(block_size=int(header[2]), vocab_size=int(header[3]), n_layer=int(header[4]),
                        n_head=int(header[5]), n_embd=int(header[6]), padded_vocab_size=int(header[7]))
        bf16 = header[1] == MODEL_VERSION_BF16
        model = GPT(cfg, attn)
        with torch.no_grad():
            for params in model.llmc_params():
                n = sum(p.numel() for p in params)
                if bf16:
                    raw = np.frombuffer(f.read(2 * n), dtype="<u2")
                    data = (raw.astype(np.uint32) << 16).view(np.float32)
                else:
                    data = np.frombuffer(f.read(4 * n), dtype="<f4")
                if data.size != n:
                    sys.exit(f"error: {path} is truncated")
                flat = torch.from_numpy(data.copy())
                for p in params:
                    p.copy_(flat[:p.numel()].view_as(p))
                    flat = flat[p.numel():]
        if f.read(1):
            sys.exit(f"error: {path} has trailing bytes: wrong config in the header?")
    return model

def write_state(model, x, y, logits, loss, path):
    B, T = x.shape
    with open(path, "wb") as f:
        f.write(header_bytes([STATE_MAGIC, STATE_VERSION, B, T]))
        f.write(x.cpu().numpy().astype("<i4").tobytes())
        f.write(y.cpu().numpy().astype("<i4").tobytes())
        f.write(to_fp32_bytes(logits))
        f.write(struct.pack("<f", loss.item()))
        for params in model.llmc_params():
            for p in params:
                f.write(to_fp32_bytes(p.grad))  # wte grad is (Vp, C): rows >= V are exactly zero
    print(f"wrote {path} (B={B}, T={T}, {os.path.getsize(path):,} bytes)")

class DataLoader:
    """llm.c's loader on one shard, one process, no shuffling: consecutive B·T+1 windows, wrapping to 0 at the end."""

    def __init__(self, path, B, T):
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(1024), dtype="<i4")
            if len(header) != 256 or header[0] != DATA_MAGIC or header[1] != DATA_VERSION:
                sys.exit(f"error: {path} is not an llm.c token shard (run scripts/prepro_tinyshakespeare.py)")
            self.tokens = np.frombuffer(f.read(), dtype="<u2").astype(np.int64)
        if len(self.tokens) != header[2]:
            sys.exit(f"error: {path}: header says {header[2]} tokens, file holds {len(self.tokens)}")
        if len(self.tokens) < B * T + 1:
            sys.exit(f"error: {path} has {len(self.tokens)} tokens, fewer than B*T+1 = {B * T + 1}")
        self.B, self.T, self.pos = B, T, 0

    def next_batch(self):
        B, T = self.B, self.T
        if self.pos + B * T + 1 > len(self.tokens):
            self.pos = 0
        buf = torch.from_numpy(self.tokens[self.pos:self.pos + B * T + 1])
        self.pos += B * T
        return buf[:-1].view(B, T), buf[1:].view(B, T)

# -----------------------------------------------------------------------------
# optimization, as llm.c does it

def make_optimizer(model, lr, weight_decay, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]    # wte, wpe, qkvw, attprojw, fcw, fcprojw
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases and LayerNorm
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.startswith("cuda")
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)

def clip_grads(model, max_norm):
    """Global L2 norm; if above max_norm, scale every gradient by max_norm / norm (no epsilon, as llm.c)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
    scale = torch.where(norm > max_norm, max_norm / norm, torch.ones_like(norm))
    torch._foreach_mul_(grads, scale)
    return norm

def lr_at(step, args):
    """llm.c's cosine schedule: linear warmup over -u steps, then cosine from lr to lr·q at step -x."""
    if step < args.warmup_iters:
        return args.learning_rate * (step + 1) / args.warmup_iters
    decay_ratio = (step - args.warmup_iters) / max(1, args.num_iterations - args.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    min_lr = args.learning_rate * args.final_lr_frac
    return min_lr + coeff * (args.learning_rate - min_lr)

# -----------------------------------------------------------------------------
# modes

def build_model(args):
    if args.init:
        model = read_model(args.init, args.attn)
        print(f"model from {args.init}")
    else:
        model = GPT(model_config(args), args.attn)
        model.init_weights(args.seed)
        print(f"model: random init, seed {args.seed}")
    c = model.cfg
    if args.seq_len > c.block_size:
        sys.exit(f"error: T={args.seq_len} > the model's max sequence length {c.block_size}")
    n = sum(p.numel() for p in model.parameters())
    print(f"config: L={c.n_layer} C={c.n_embd} NH={c.n_head} maxT={c.block_size} V={c.vocab_size} Vp={c.padded_vocab_size}"
          f" | {n:,} parameters (wte padded)")
    return model

def model_config(args):
    if args.depth_desc:
        desc = args.depth_desc.removeprefix("gpt2:")
        depth = int(desc[1:]) if desc[:1] == "d" and desc[1:].isdigit() else -1
        if depth not in GPT2_DEPTHS:
            sys.exit(f"error: -e {args.depth_desc}: only d12, d24, d36, d48 (or --depth/--channels/--heads)")
        C, NH = GPT2_DEPTHS[depth]
        return GPTConfig(n_layer=depth, n_embd=C, n_head=NH, block_size=args.max_seq_len)
    if args.channels % args.heads != 0:
        sys.exit(f"error: --channels {args.channels} is not a multiple of --heads {args.heads}")
    return GPTConfig(n_layer=args.depth, n_embd=args.channels, n_head=args.heads, block_size=args.max_seq_len)

def write_reference(args):
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
    torch.backends.cudnn.allow_tf32 = False
    device = args.device
    model = build_model(args)
    c = model.cfg
    prefix = args.prefix or ("gpt2_124M" if (c.n_layer, c.n_embd, c.n_head) == (12, 768, 12) else
                             f"gpt2_L{c.n_layer}_C{c.n_embd}_H{c.n_head}")
    os.makedirs(args.write_reference, exist_ok=True)
    out = lambda suffix: os.path.join(args.write_reference, prefix + suffix)
    write_model(model, out(".bin"), "float32")
    write_model(model, out("_bf16.bin"), "bfloat16")
    check = read_model(out(".bin"))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(model.llmc_tensors(), check.llmc_tensors())), "fp32 round trip"

    model.to(device)
    x, y = DataLoader(args.input_bin, args.batch_size, args.seq_len).next_batch()
    x, y = x.to(device), y.to(device)
    logits, loss = model(x, y)
    loss.backward()
    print(f"debug state: B={args.batch_size} T={args.seq_len} loss {loss.item():.6f}")
    write_state(model, x, y, logits, loss, out("_debug_state.bin"))

    # 10 AdamW steps on the same batch; the first step reuses the gradients just computed
    optimizer = make_optimizer(model, args.ref_lr, 0.0, device)
    losses = []
    for step in range(10):
        if step > 0:
            optimizer.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
        losses.append(loss.item())
        norm = clip_grads(model, 1.0)
        optimizer.step()
        print(f"step {step}: loss {losses[-1]:.6f} norm {norm.item():.4f} (lr {args.ref_lr:g})")
    with open(out("_ref_losses.txt"), "w") as f:
        f.writelines(f"{l:.8f}\n" for l in losses)
    print(f"wrote {out('_ref_losses.txt')}")

def train(args):
    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
    torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    model = build_model(args).to(device)
    B, T = args.batch_size, args.seq_len
    tokens_per_micro = B * T
    total = args.total_batch_size if args.total_batch_size > 0 else tokens_per_micro
    if total % tokens_per_micro != 0:
        sys.exit(f"error: total batch {total} is not a multiple of B*T = {tokens_per_micro}")
    grad_accum = total // tokens_per_micro
    loader = DataLoader(args.input_bin, B, T)
    optimizer = make_optimizer(model, args.learning_rate, args.weight_decay, device)
    step_model = torch.compile(model) if args.compile else model
    autocast = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")
    sdpa_context = contextlib.nullcontext
    if SDPA_BACKENDS[args.sdpa_backend]:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = getattr(SDPBackend, SDPA_BACKENDS[args.sdpa_backend])
        sdpa_context = lambda: sdpa_kernel([backend])
    print(f"train: B={B} T={T} grad_accum={grad_accum} steps={args.num_iterations} lr={args.learning_rate:g} "
          f"warmup={args.warmup_iters} final_frac={args.final_lr_frac:g} wd={args.weight_decay:g} dtype={args.dtype} "
          f"attn={args.attn}{'' if args.attn == 'manual' else '/' + args.sdpa_backend} compile={bool(args.compile)} "
          f"device={device}{' (' + torch.cuda.get_device_name() + ')' if device.startswith('cuda') else ''}")

    losses, times = [], []
    for step in range(args.num_iterations):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        for _ in range(grad_accum):
            x, y = loader.next_batch()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast, sdpa_context():
                _, loss = step_model(x, y)
            loss = loss / grad_accum
            loss_sum += loss.detach()
            loss.backward()
        norm = clip_grads(model, args.grad_clip)
        lr = 0.0 if (args.skip_first_update and step == 0) else lr_at(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        loss_value = loss_sum.item()  # synchronizes
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(loss_value)
        times.append(dt)
        print(f"step {step + 1:4d}/{args.num_iterations} | loss {loss_value:.6f} | norm {norm.item():.4f} | lr {lr:.2e} | "
              f"{dt * 1000:.2f} ms | {total / dt:.0f} tok/s", flush=True)

    if args.loss_out:
        with open(args.loss_out, "w") as f:
            f.writelines(f"{i} {l:.6f}\n" for i, l in enumerate(losses))
        print(f"wrote {args.loss_out}")
    timed = times[args.bench_skip:]
    if timed:
        med = sorted(timed)[len(timed) // 2]
        print(f"steady state over {len(timed)} steps (after {args.bench_skip} warmup): {total * len(timed) / sum(timed):.0f} tok/s, "
              f"median {med * 1000:.2f} ms/step ({total / med:.0f} tok/s)")
        if device.startswith("cuda"):
            print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB on {torch.cuda.get_device_name()}")

def main():
    p = argparse.ArgumentParser(description="GPT-2 PyTorch reference for flashgpt (see the header of this file)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write_reference", metavar="DIR", help="write model files, debug state and 10-step losses")
    mode.add_argument("--train", action="store_true", help="train and print/write the loss curve")
    mode.add_argument("--bench", action="store_true", help="throughput: d12, B=64, T=1024, compile, SDPA, bf16")
    # model
    p.add_argument("-e", dest="depth_desc", default=None, help="d12|d24|d36|d48 (overrides --depth/--channels/--heads)")
    p.add_argument("--depth", type=int, default=12, help="L (default: d12's)")
    p.add_argument("--channels", type=int, default=768, help="C")
    p.add_argument("--heads", type=int, default=12, help="NH")
    p.add_argument("--max_seq_len", type=int, default=1024)
    p.add_argument("--init", default=None, help="llm.c model file to start from (else random init from --seed)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--sdpa_backend", choices=list(SDPA_BACKENDS), default="auto",
                   help="restrict SDPA to one kernel (auto: PyTorch picks; --bench: flash)")
    # data and optimization (llm.c's letters where they exist)
    p.add_argument("--input_bin", "-i", default=DEFAULT_TRAIN, help="train token shard")
    p.add_argument("-B", "-b", dest="batch_size", type=int, default=None, help="micro-batch (default 4; --bench 64)")
    p.add_argument("-T", "-t", dest="seq_len", type=int, default=None, help="sequence length (default 1024, --write_reference 64)")
    p.add_argument("-d", dest="total_batch_size", type=int, default=-1, help="total batch in tokens (-1: B*T)")
    p.add_argument("-x", dest="num_iterations", type=int, default=None, help="steps (default 50; --bench 40)")
    p.add_argument("-l", dest="learning_rate", type=float, default=3e-4)
    p.add_argument("-u", dest="warmup_iters", type=int, default=0)
    p.add_argument("-q", dest="final_lr_frac", type=float, default=1.0)
    p.add_argument("-c", dest="weight_decay", type=float, default=0.0)
    p.add_argument("--grad_clip", type=float, default=1.0)
    p.add_argument("--skip_first_update", type=int, default=0, help="1: lr 0 on step 0 (llm.c quirk)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="autocast dtype for --train")
    p.add_argument("--tf32", type=int, default=1, help="allow TF32 matmuls in --train (the reference never uses TF32)")
    p.add_argument("--compile", type=int, default=0)
    p.add_argument("--device", default=None, help="cuda if available, else cpu")
    p.add_argument("--loss_out", default=None, help="--train: write 'step loss' lines here")
    p.add_argument("--bench_skip", type=int, default=None, help="warmup steps left out of the tok/s summary (default 1; --bench 10)")
    p.add_argument("--prefix", default=None, help="--write_reference file name prefix")
    p.add_argument("--ref_lr", type=float, default=1e-4, help="--write_reference: lr of the 10 AdamW steps")
    args = p.parse_args()

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.bench:
        args.depth_desc, args.init, args.attn, args.compile, args.dtype = "d12", None, "sdpa", 1, "bfloat16"
        if args.sdpa_backend == "auto":
            args.sdpa_backend = "flash"
    defaults = dict(batch_size=64 if args.bench else 4,
                    seq_len=64 if args.write_reference else 1024,
                    num_iterations=40 if args.bench else 50,
                    bench_skip=10 if args.bench else 1)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.write_reference:
        write_reference(args)
    else:
        train(args)

if __name__ == "__main__":
    main()
