"""flashgpt's fused flash attention (src/attention.cuh) for PyTorch, forward and backward, through
libflashgpt_attention.so and ctypes: no extension to build against PyTorch.

  make lib                                   # ./libflashgpt_attention.so, in the repo root
  import sys; sys.path.insert(0, "python")
  from flashgpt_attention import flash_attention
  y = flash_attention(q, k, v, causal=True)  # in place of F.scaled_dot_product_attention(q, k, v, is_causal=True)

q (B, H, T, D), k and v (B, H_kv, Tk, D): bf16 CUDA tensors, layout="bhtd" as F.scaled_dot_product_attention takes
them; layout="bthd" takes (B, T, H, D) and (B, Tk, H_kv, D). out has q's shape (its memory is (B, T, H, D), so
out.transpose(1, 2) is contiguous for "bhtd"). GQA / MQA when H_kv divides H. D 32, 64, 96, 128, 256.

causal with T != Tk aligns the diagonal bottom-right (query i sees key j <= i + Tk - T, as FlashAttention 2.1+ does);
SDPA's is_causal aligns it top-left. Rows that see no key (causal, T > Tk) give 0 and no gradient.

Any strides pass without a copy when the head dim is contiguous, the other strides are multiples of 8 elements and
the data 16-byte aligned (views into a fused QKV buffer included); other tensors are copied first. The library is
found at $FLASHGPT_ATTENTION_LIB, else at the repo root. An unsupported call raises FlashAttentionError with the
library's reason.

Limits (src/attention.cuh's): one GPU per process (the first one used); on Hopper, two calls must not run on two
streams at once (its persistent schedule keeps one counter per kernel).
"""
import ctypes
import math
import os

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB_NAME = "libflashgpt_attention.so"
LAYOUTS = ("bhtd", "bthd")


class FlashAttentionError(RuntimeError):
    """a call the library refuses (the message says why) or a CUDA error it reported"""


# ----------------------------------------------------------------------------
# the library (src/attention_capi.h), loaded on first use

_lib = None


def library_path():
    return os.environ.get("FLASHGPT_ATTENTION_LIB") or os.path.join(REPO_ROOT, LIB_NAME)


def _library():
    global _lib
    if _lib is None:
        path = library_path()
        if not os.path.exists(path):
            raise FlashAttentionError(f"{path} not found: build it with `make lib` in {REPO_ROOT}, "
                                      "or point FLASHGPT_ATTENTION_LIB at it")
        lib = ctypes.CDLL(path)
        ptr, strides, i32 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int
        shape = [i32] * 7  # B, T, Tk, NH, NH_kv, HS, causal
        lib.flashgpt_attention_forward.argtypes = [ptr] * 5 + [strides] * 4 + shape + [ctypes.c_float, ptr]
        lib.flashgpt_attention_forward.restype = ctypes.c_char_p
        lib.flashgpt_attention_backward_scratch_bytes.argtypes = shape
        lib.flashgpt_attention_backward_scratch_bytes.restype = ctypes.c_size_t
        lib.flashgpt_attention_backward.argtypes = ([ptr] * 9 + [strides] * 8 + shape +
                                                    [ctypes.c_float, ptr, ctypes.c_size_t, ptr])
        lib.flashgpt_attention_backward.restype = ctypes.c_char_p
        lib.flashgpt_attention_version.argtypes = []
        lib.flashgpt_attention_version.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def library_version():
    """the git commit the library was built from"""
    return _library().flashgpt_attention_version().decode()


# ----------------------------------------------------------------------------
# tensors <-> the library's (batch, row, head) strides

def _sizes(x, layout):
    """(B, T, H, D) of a (B, H, T, D) "bhtd" or (B, T, H, D) "bthd" tensor"""
    if layout == "bhtd":
        b, h, t, d = x.shape
        return b, t, h, d
    return tuple(x.shape)


def _strides(x, layout):
    """(batch, row, head) strides in elements. PyTorch may give a dim of size 1 any stride; it is never stepped
    along, so it gets the (B, T, H, D) contiguous one, which meets the library's rules."""
    b, t, h, d = _sizes(x, layout)
    s = x.stride()
    sb, st, sh = (s[0], s[2], s[1]) if layout == "bhtd" else (s[0], s[1], s[2])
    return (sb if b > 1 else t * h * d, st if t > 1 else h * d, sh if h > 1 else d)


def _usable(x, layout):
    """x goes to the kernels as it is: head dim contiguous, the other strides positive multiples of 8 elements
    (16-byte rows), data 16-byte aligned"""
    return (x.stride(3) == 1 and x.data_ptr() % 16 == 0 and
            all(s > 0 and s % 8 == 0 for s in _strides(x, layout)))


def _ready(x, layout):
    """x, or a fresh contiguous (so aligned) copy of it where the kernels can't read it in place"""
    return x if _usable(x, layout) else x.clone(memory_format=torch.contiguous_format)


def _empty_bthd(like, sizes, layout):
    """an empty tensor of (B, T, H, D) sizes in (B, T, H, D) memory, shaped for the layout"""
    x = torch.empty(sizes, dtype=like.dtype, device=like.device)
    return x.transpose(1, 2) if layout == "bhtd" else x


def _empty_grad(x, layout):
    """dense x: a gradient with x's strides (a leaf's .grad takes it without a copy); else (B, T, H, D) memory, so the
    gradient of a view into nanoGPT's fused qkv, (B, T, H, D) transposed, goes back to (B, T, C) without a copy"""
    if x.is_contiguous() or x.transpose(1, 2).is_contiguous():
        g = torch.empty_like(x)
        if _usable(g, layout):
            return g
    return _empty_bthd(x, _sizes(x, layout), layout)


def _c_strides(x, layout):
    return (ctypes.c_longlong * 3)(*_strides(x, layout))


def _stream(x):
    return ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)


def _describe(B, T, Tk, H, H_kv, D, causal, layout):
    return f"B={B} T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={int(causal)} layout={layout}"


# ----------------------------------------------------------------------------
# autograd

class FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout):
        q, k, v = (_ready(x, layout) for x in (q, k, v))
        B, T, H, D = _sizes(q, layout)
        _, Tk, H_kv, _ = _sizes(k, layout)
        out = _empty_bthd(q, (B, T, H, D), layout)
        lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)  # natural log, saved for the backward
        with torch.cuda.device(q.device):
            err = _library().flashgpt_attention_forward(
                q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                _c_strides(q, layout), _c_strides(k, layout), _c_strides(v, layout), _c_strides(out, layout),
                B, T, Tk, H, H_kv, D, int(causal), scale, _stream(q))
        if err:
            raise FlashAttentionError(f"flashgpt attention forward ({_describe(B, T, Tk, H, H_kv, D, causal, layout)}): "
                                      f"{err.decode()}")
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.layout = causal, scale, layout
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, layout = ctx.causal, ctx.scale, ctx.layout
        dout = _ready(dout, layout)  # e.g. the expanded (all strides 0) gradient of out.sum()
        B, T, H, D = _sizes(q, layout)
        _, Tk, H_kv, _ = _sizes(k, layout)
        dq, dk, dv = _empty_grad(q, layout), _empty_grad(k, layout), _empty_grad(v, layout)
        lib = _library()
        with torch.cuda.device(q.device):
            scratch_bytes = lib.flashgpt_attention_backward_scratch_bytes(B, T, Tk, H, H_kv, D, int(causal))
            # 0 when the call is refused: the backward below says why
            scratch = torch.empty(max(scratch_bytes, 16), dtype=torch.uint8, device=q.device)
            err = lib.flashgpt_attention_backward(
                dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dout.data_ptr(), q.data_ptr(), k.data_ptr(),
                v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                _c_strides(dq, layout), _c_strides(dk, layout), _c_strides(dv, layout), _c_strides(dout, layout),
                _c_strides(q, layout), _c_strides(k, layout), _c_strides(v, layout), _c_strides(out, layout),
                B, T, Tk, H, H_kv, D, int(causal), scale, scratch.data_ptr(), scratch_bytes, _stream(q))
        if err:
            raise FlashAttentionError(f"flashgpt attention backward ({_describe(B, T, Tk, H, H_kv, D, causal, layout)}): "
                                      f"{err.decode()}")
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=True, scale=None, layout="bhtd"):
    """softmax(scale * q k^T, causal mask) v; scale defaults to 1 / sqrt(D). See the module docstring for shapes."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor ({'B, H, T, D' if layout == 'bhtd' else 'B, T, H, D'})")
        if x.dtype != torch.bfloat16 or not x.is_cuda:
            raise TypeError(f"{name} must be a bfloat16 CUDA tensor, not {x.dtype} on {x.device}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, not {q.device}, {k.device}, {v.device}")
    (B, _, _, D), (Bk, _, _, Dk) = _sizes(q, layout), _sizes(k, layout)
    if k.shape != v.shape or Bk != B or Dk != D:
        raise ValueError(f"k and v must have one shape, with q's batch and head dim: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)} ({layout})")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    return FlashAttentionFunction.apply(q, k, v, bool(causal), float(scale), layout)
