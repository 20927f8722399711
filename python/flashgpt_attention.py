"""flashgpt's fused flash attention (src/attention.cuh) for PyTorch, forward and backward, through
libflashgpt_attention.so and ctypes: no extension to build against PyTorch.

  make lib                                   # ./libflashgpt_attention.so, in the repo root
  import sys; sys.path.insert(0, "python")   # or pip install ./python (make lib, the library inside the package)
  from flashgpt_attention import flash_attention
  y = flash_attention(q, k, v, causal=True)  # in place of F.scaled_dot_product_attention(q, k, v, is_causal=True)

q (B, H, T, D), k and v (B, H_kv, Tk, D): bf16 or fp16 CUDA tensors (one dtype), layout="bhtd" as F.scaled_dot_product_attention takes
them; layout="bthd" takes (B, T, H, D) and (B, Tk, H_kv, D). out has q's shape (its memory is (B, T, H, D), so
out.transpose(1, 2) is contiguous for "bhtd"). GQA / MQA when H_kv divides H. D 8, 16, 32, 64, 96, 128, 256; on Hopper
any multiple of 8 up to 256 where attention_unsupported_reason takes it (flash_attn_interface pads to those).

causal with T != Tk aligns the diagonal bottom-right (query i sees key j <= i + Tk - T, as FlashAttention 2.1+ does);
SDPA's is_causal aligns it top-left. Rows that see no key (causal, T > Tk) give 0 and no gradient.

Extras (src/attention.cuh's AttentionExtras):
  bias         softmax(scale * q k^T + bias): a bf16, fp16 (read as fp32) or fp32 tensor that broadcasts to (B, H, T, Tk) (as SDPA's float
               attn_mask), read in place through its strides (a dim of size 1 broadcasts). A -inf entry masks its key.
               With bias.requires_grad its gradient comes back in its dtype (summed over its broadcast dims).
  key_lengths  (B,) int: sequence b sees its first key_lengths[b] keys (key padding; k and v stay (.., Tk, ..));
               causal aligns each sequence's diagonal to its own length: query i sees key j <= i + key_lengths[b] - T
  packed sequences (FlashAttention's varlen): q (total_q, H, D), k and v (total_k, H_kv, D), out like q;
               cu_seqlens_q, cu_seqlens_k (B + 1,) int, the first row of each sequence and the total; max_seqlen_q,
               max_seqlen_k the longest sequences (read from cu_seqlens, which synchronises, when not given).
               cu_seqlens / max_seqlen stand for both (a packed self-attention batch). The layout does not apply.
               A bias is then (B, H, max_seqlen_q, max_seqlen_k), each sequence's (i, j) from (0, 0). On Hopper a
               pack with no other extra runs the wgmma kernels (D 64, 128; the forward at 256 too).
  gate         output gating (AlphaFold's): a tensor of out's shape and dtype (in the call's layout; packed (total_q, H, D));
               the call returns out * gate, the product taken in the kernel as it writes out, and with
               gate.requires_grad the gate's gradient comes back too. A gate whose memory differs from out's
               ((B, T, H, D) contiguous; packed (total_q, H, D)) is copied into such memory first; its gradient has
               out's memory.
  bias2        a second bias like bias, with its own broadcast shape, dtype and gradient (AlphaFold's mask bias beside
               its pair bias); a bias without query rows costs the kernels one value per key
  key_mask     (B, Tk) bool (or (Tk,), (1, Tk) for every sequence): True where the key is seen, any pattern
Modifiers (FlashAttention's; they compose with each other and with the extras):
  window_size  (left, right): query i sees keys i + Tk - T - left .. i + Tk - T + right (-1: unbounded), per sequence
  softcap      > 0: each score is softcap * tanh(scale q.k / softcap) (not with bias, bias2 or key_mask)
  alibi_slopes (H,) or (B, H) fp32: -slope * |i + Tk - T - j| added to each score
  dropout_p    > 0: dropout on the probabilities (dropout_seed, or one from PyTorch's CPU generator; dropout_mask
               gives the mask); not with softcap
Inference against a KV cache (FlashAttention's flash_attn_with_kvcache; flashgpt.flash_attn_interface has its call):
  kvcache_attention(q, k_cache, v_cache, k_new, v_new, cache_seqlens, ...)   contiguous or paged caches, the new keys
                                                             and values appended in place (rotary), one kernel
AlphaFold-family calls with the conventions of NVIDIA's cuEquivariance and DeepSpeed's DS4Sci_EvoformerAttention:
  triangle_attention(q, k, v, bias, mask=None, scale=None)   q (B, N, H, Q, D), bias (B, 1, H, Q, K), mask (B, N, 1, 1, K)
  evoformer_attention(q, k, v, biases)                       q (B, N, L, H, D), biases: up to two, e.g. (B, N, 1, 1, L)
                                                             and (B, 1, H, L, L)
On Hopper these run the wgmma kernels at head dims 8 to 256, with the bias gradient summed in the kernel in a fixed
order (no (B, H, T, Tk) buffer).
A row whose keys are all masked (key_lengths, key_mask, -inf bias, causal) gives 0 and no gradient (SDPA gives NaN). The lengths
are not checked against the shapes (that would synchronise): they must lie within them.

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
import struct

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB_NAME = "libflashgpt_attention.so"
LAYOUTS = ("bhtd", "bthd")
DTYPES = (torch.bfloat16, torch.float16)   # q, k, v, out and the gate: one of these, all alike
# the version of src/attention_capi.h's signatures this module calls (flashgpt_attention_abi; 9: the padded head dims' limit)
ABI = 9


class FlashAttentionError(RuntimeError):
    """a call the library refuses (the message says why) or a CUDA error it reported"""


# ----------------------------------------------------------------------------
# the library (src/attention_capi.h), loaded on first use

_lib = None


def library_path():
    """FLASHGPT_ATTENTION_LIB, else the copy `pip install ./python` put in the flashgpt package, else the repository's"""
    if os.environ.get("FLASHGPT_ATTENTION_LIB"):
        return os.environ["FLASHGPT_ATTENTION_LIB"]
    installed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flashgpt", LIB_NAME)
    return installed if os.path.exists(installed) else os.path.join(REPO_ROOT, LIB_NAME)


def _library():
    global _lib
    if _lib is None:
        path = library_path()
        if not os.path.exists(path):
            raise FlashAttentionError(f"{path} not found: build it with `make lib` in {REPO_ROOT}, "
                                      "or point FLASHGPT_ATTENTION_LIB at it")
        lib = ctypes.CDLL(path)
        # an older library's _ex calls take other arguments (calling them would pass garbage): refuse it
        abi = 0
        if hasattr(lib, "flashgpt_attention_abi"):
            lib.flashgpt_attention_abi.argtypes = []
            lib.flashgpt_attention_abi.restype = ctypes.c_int
            abi = lib.flashgpt_attention_abi()
        if abi < ABI:
            raise FlashAttentionError(f"{path} predates this module's interface (its ABI {abi or 'unnumbered'}, this "
                                      f"module needs {ABI}: flashgpt_attention_padded_head_dim_limit): rebuild it with "
                                      f"`make lib` in {REPO_ROOT}")
        ptr, strides, i32 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int
        shape = [i32] * 7  # B, T, Tk, NH, NH_kv, HS, causal
        # bias, bias_strides, bias_fp32, seqlens_k, cu_seqlens_q, cu_seqlens_k, total_q, total_k, gate, gate_strides
        extras = [ptr, strides, i32, ptr, ptr, ptr, i32, i32, ptr, strides]
        # bias2, bias2_strides, bias2_fp32, key_mask, key_mask_batch
        extras2 = [ptr, strides, i32, ptr, ctypes.c_longlong]
        # window_left, window_right, softcap, alibi_slopes, alibi_batch
        window = [i32, i32, ctypes.c_float, ptr, ctypes.c_longlong]
        # dropout_p, dropout_seed, dropout_offset
        dropout = [ctypes.c_float, ctypes.c_ulonglong, ctypes.c_ulonglong]
        lib.flashgpt_attention_forward_ex.argtypes = ([ptr] * 5 + [strides] * 4 + shape + [ctypes.c_float] + extras +
                                                      [ptr] + extras2 + window + dropout + [i32, ptr])  # gated_out, ..., fp16, stream
        lib.flashgpt_attention_forward_ex.restype = ctypes.c_char_p
        lib.flashgpt_attention_backward_scratch_bytes_ex.argtypes = (shape + extras + [ptr] + extras2 + [ptr] +
                                                                     window + [ctypes.c_float])  # dbias, ..., dbias2, window, ..., dropout_p
        lib.flashgpt_attention_backward_scratch_bytes_ex.restype = ctypes.c_size_t
        # after the extras: dgate, dbias, the second extras, dbias2, the window and modifiers, scratch, scratch_bytes, stream
        lib.flashgpt_attention_backward_ex.argtypes = ([ptr] * 9 + [strides] * 8 + shape + [ctypes.c_float] + extras +
                                                       [ptr, ptr] + extras2 + [ptr] + window + dropout +
                                                       [i32, ptr, ctypes.c_size_t, ptr])
        lib.flashgpt_attention_backward_ex.restype = ctypes.c_char_p
        # the plain calls (no extras; the window and modifiers kept), a FlashgptAttentionCall's bytes each: the plan's path
        for call in (lib.flashgpt_attention_forward, lib.flashgpt_attention_backward):
            call.argtypes = [ptr]
            call.restype = ctypes.c_char_p
        lib.flashgpt_attention_backward_scratch_bytes.argtypes = shape
        lib.flashgpt_attention_backward_scratch_bytes.restype = ctypes.c_size_t
        lib.flashgpt_attention_dropout_mask.argtypes = [ptr] + [i32] * 4 + [ptr, ptr] + dropout + [ptr]
        lib.flashgpt_attention_dropout_mask.restype = ctypes.c_char_p
        # q, k_cache, v_cache, out, lse, 4 strides, shape, scale, cu_seqlens_q, cache_seqlens, cache_seqlen,
        # cache_batch_idx, cache_leftpad, block_table, block_table_batch, page_size, k_new, v_new, their strides, T_new,
        # rotary_cos, rotary_sin, rotary_dim, rotary_interleaved, rotary_per_token, window and modifiers, num_splits,
        # fp16, stream
        lib.flashgpt_attention_kvcache.argtypes = ([ptr] * 5 + [strides] * 4 + shape +
                                                   [ctypes.c_float, ptr, ptr, i32, ptr, ptr, ptr, ctypes.c_longlong, i32,
                                                    ptr, ptr, strides, strides, i32, ptr, ptr, i32, i32, i32] +
                                                   window + [i32, i32, ptr])
        lib.flashgpt_attention_kvcache.restype = ctypes.c_char_p
        lib.flashgpt_attention_padded_head_dim_limit.argtypes = [i32] * 3
        lib.flashgpt_attention_padded_head_dim_limit.restype = i32
        lib.flashgpt_attention_version.argtypes = []
        lib.flashgpt_attention_version.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def library_version():
    """the git commit the library was built from"""
    return _library().flashgpt_attention_version().decode()


_padded_limits = {}


def _padded_head_dim_limit(device_index, packed, score_mods, dropout):
    key = (device_index, packed, score_mods, dropout)
    if key not in _padded_limits:
        with torch.cuda.device(device_index):
            _padded_limits[key] = _library().flashgpt_attention_padded_head_dim_limit(packed, score_mods, dropout)
    return _padded_limits[key]


# a constant of its arguments: under torch.compile the graph holds the answer, not the library call
if hasattr(torch, "compiler") and hasattr(torch.compiler, "assume_constant_result"):
    _padded_head_dim_limit = torch.compiler.assume_constant_result(_padded_head_dim_limit)


def padded_head_dim_limit(device, packed=False, score_mods=False, dropout=False):
    """the largest head dim between the library's own (8, 16, 32, 64, 96, 128, 256) that a call with these features takes
    on device as it is, zero-padded inside its kernels (0: none; packed: packed sequences without other extras,
    score_mods: softcap or ALiBi); a caller pads a head dim past it to the next of the library's own
    (src/attention_capi.h's flashgpt_attention_padded_head_dim_limit)"""
    return _padded_head_dim_limit(device.index, int(bool(packed)), int(bool(score_mods)), int(bool(dropout)))


# ----------------------------------------------------------------------------
# tensors <-> the library's (batch, row, head) strides. Layouts: "bhtd", "bthd", and "thd" for packed sequences
# ((total, H, D), the call's B and T from cu_seqlens)

def _sizes(x, layout):
    """(B, T, H, D) of a (B, H, T, D) "bhtd" or (B, T, H, D) "bthd" tensor; a packed (total, H, D) "thd" tensor is one
    batch of total rows"""
    if layout == "bhtd":
        b, h, t, d = x.shape
        return b, t, h, d
    if layout == "thd":
        return (1,) + tuple(x.shape)
    return tuple(x.shape)


def _strides(x, layout):
    """(batch, row, head) strides in elements. PyTorch may give a dim of size 1 any stride; it is never stepped
    along, so it gets the (B, T, H, D) contiguous one, which meets the library's rules. Packed: batch stride 0, since
    cu_seqlens counts each sequence's rows from the tensor's first."""
    b, t, h, d = _sizes(x, layout)
    s = x.stride()
    if layout == "thd":
        return (0, s[0] if t > 1 else h * d, s[1] if h > 1 else d)
    sb, st, sh = (s[0], s[2], s[1]) if layout == "bhtd" else (s[0], s[1], s[2])
    return (sb if b > 1 else t * h * d, st if t > 1 else h * d, sh if h > 1 else d)


def _usable(x, layout):
    """x goes to the kernels as it is: head dim contiguous, the other strides positive multiples of 8 elements
    (16-byte rows; packed, the batch stride is 0 by design), data 16-byte aligned"""
    strides = _strides(x, layout)[1:] if layout == "thd" else _strides(x, layout)
    return x.stride(-1) == 1 and x.data_ptr() % 16 == 0 and all(s > 0 and s % 8 == 0 for s in strides)


def _ready(x, layout):
    """x, or a fresh contiguous (so aligned) copy of it where the kernels can't read it in place"""
    return x if _usable(x, layout) else x.clone(memory_format=torch.contiguous_format)


def _empty_bthd(like, sizes, layout):
    """an empty tensor of (B, T, H, D) sizes in (B, T, H, D) memory, shaped for the layout"""
    x = torch.empty(sizes, dtype=like.dtype, device=like.device)
    return x.transpose(1, 2) if layout == "bhtd" else x


def _empty_out(q, layout):
    """out for q: (B, T, H, D) memory; packed, zeros, since rows past the last sequence (if q has any) are not
    written"""
    if layout == "thd":
        return torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    return _empty_bthd(q, _sizes(q, layout), layout)


def _as_layout(x_bthd, layout):
    """a (B, T, H, D) tensor as the layout shapes it"""
    return x_bthd.transpose(1, 2) if layout == "bhtd" else x_bthd


def _grad_strides(x, layout):
    """the strides of x's gradient in _grad_memory: x's own where x is dense (a leaf's .grad takes it without a copy),
    else None: (B, T, H, D) memory, so the gradient of a view into nanoGPT's fused qkv, (B, T, H, D) transposed, goes
    back to (B, T, C) without a copy"""
    if x.is_contiguous() or x.transpose(1, 2).is_contiguous():
        if all(s > 0 and s % 8 == 0 for s in _strides(x, layout)):
            return x.stride()
    return None


def _grad_memory(x, layout, strides):
    """an empty gradient for x (not packed) with _grad_strides(x, layout)'s strides: a whole tensor (x's shape and
    strides, or (B, T, H, D)), with whether it is the latter in a "bhtd" call. Reads no stride of x: the compiled
    backward calls it with strides taken in the forward, since Dynamo traces a backward that reads a tensor's strides
    with its incoming gradients made contiguous (a copy each). No address is read either, a fresh tensor's being
    aligned."""
    if strides is not None:
        return torch.empty_strided(x.shape, strides, dtype=x.dtype, device=x.device), False
    return x.new_empty(_sizes(x, layout)), layout == "bhtd"


def _empty_grad(x, layout):
    """an empty gradient for x, shaped as x (_grad_memory's memory); packed: contiguous zeros, as out"""
    if layout == "thd":
        return torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    g, bthd = _grad_memory(x, layout, _grad_strides(x, layout))
    return _as_layout(g, layout) if bthd else g


def _c_strides(x, layout):
    return (ctypes.c_longlong * 3)(*_strides(x, layout))


def _bias_strides(bias):
    """(batch, row = query, head) strides in elements of a 4-d (B, H, T, Tk) bias; a dim of size 1 broadcasts
    (stride 0)"""
    s = bias.stride()
    return tuple(s[i] if bias.shape[i] > 1 else 0 for i in (0, 2, 1))


def _ptr(x):
    return None if x is None else x.data_ptr()


def _extras(bias, key_lengths, cu_seqlens_q, cu_seqlens_k, gate, layout, q, k):
    """the library's extras arguments: bias, bias_strides, bias_fp32, seqlens_k, cu_seqlens_q, cu_seqlens_k, total_q,
    total_k (packed: q's and k's rows), gate, gate_strides (None: a null pointer)"""
    bias_strides = None if bias is None else (ctypes.c_longlong * 3)(*_bias_strides(bias))
    bias_fp32 = int(bias is not None and bias.dtype == torch.float32)
    gate_strides = None if gate is None else _c_strides(gate, layout)
    totals = (q.shape[0], k.shape[0]) if layout == "thd" else (0, 0)
    return [_ptr(bias), bias_strides, bias_fp32, _ptr(key_lengths), _ptr(cu_seqlens_q), _ptr(cu_seqlens_k), *totals,
            _ptr(gate), gate_strides]


def _extras2(bias2, key_mask):
    """the library's second extras: bias2, bias2_strides, bias2_fp32, key_mask, key_mask_batch"""
    strides = None if bias2 is None else (ctypes.c_longlong * 3)(*_bias_strides(bias2))
    batch = 0 if key_mask is None or key_mask.shape[0] == 1 else key_mask.stride(0)
    return [_ptr(bias2), strides, int(bias2 is not None and bias2.dtype == torch.float32), _ptr(key_mask), batch]


try:  # whether torch.compile is tracing this call
    _compiling = torch.compiler.is_compiling
except AttributeError:  # pragma: no cover
    def _compiling():
        return False

try:  # the current stream's handle without building a torch.cuda.Stream (what SDPA's C++ call reads), and the
    # current device without torch.cuda.current_device's Python layer (a call with CUDA tensors has initialised CUDA)
    _raw_stream = torch._C._cuda_getCurrentRawStream
    _current_device = torch._C._cuda_getDevice
    _stream_capturing = torch._C._cuda_isCurrentStreamCapturing
except AttributeError:  # pragma: no cover
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream
    _current_device = torch.cuda.current_device
    _stream_capturing = torch.cuda.is_current_stream_capturing


def _call(device, fn, *args):
    """fn(*args, stream) on device (switching only where the current device differs), on its current stream"""
    if _current_device() == device.index:
        return fn(*args, _raw_stream(device.index))
    with torch.cuda.device(device):
        return fn(*args, _raw_stream(device.index))


_NO_MODS = (-1, -1, 0.0, None, 0, 0.0, 0, 0)   # no window, softcap, ALiBi or dropout


class _Call(ctypes.Structure):
    """src/attention_capi.h's FlashgptAttentionCall, the plain calls' arguments: the tensors' pointers in one array
    (q, k, v, out, lse, dout, dq, dk, dv) and their strides in another (q, k, v, out, dout, dq, dk, dv). A plan keeps
    one as its template, from which it makes the tails of its calls' bytes (_call_tail)"""
    _fields_ = [("tensors", ctypes.c_void_p * 9), ("scratch", ctypes.c_void_p), ("scratch_bytes", ctypes.c_size_t),
                ("stream", ctypes.c_void_p), ("alibi_slopes", ctypes.c_void_p), ("alibi_batch", ctypes.c_longlong),
                ("dropout_seed", ctypes.c_ulonglong), ("dropout_offset", ctypes.c_ulonglong),
                ("strides", (ctypes.c_longlong * 3) * 8)] + \
               [(name, ctypes.c_int) for name in ("B", "T", "Tk", "NH", "NH_kv", "HS", "causal", "fp16")] + \
               [("scale", ctypes.c_float), ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("softcap", ctypes.c_float), ("dropout_p", ctypes.c_float)]


assert (ctypes.sizeof(_Call), _Call.strides.offset, _Call.B.offset) == (376, 128, 320), "_Call's layout is C's"

# A plan's calls go to the library as bytes: the head, _Call's fields up to its strides (the 9 tensors' addresses, the
# scratch, the stream, the ALiBi slopes and the dropout's seed), packed for each call, and the tail, the rest (strides,
# shape, scale, window and modifiers), which the plan keeps per modifier set (_call_tail). One pack and one
# concatenation a call: filling a _Call field by field costs several times that.
_CALL_HEAD = struct.Struct("=13Qq2Q")
_U64 = (1 << 64) - 1
assert _CALL_HEAD.size == _Call.strides.offset, "_CALL_HEAD is _Call's head"


def _call_tail(plan, mods, strides=None):
    """the bytes of plan's call past the head: mods' window, softcap and dropout_p (see _mods) where given, and the
    backward's dout, dq, dk and dv strides (ctypes) where given"""
    call = _Call.from_buffer_copy(plan.call)
    if mods is not None:
        (call.window_left, call.window_right, call.softcap, _, _, call.dropout_p, _, _) = _mods(mods)
    if strides is not None:
        call.strides[4], call.strides[5], call.strides[6], call.strides[7] = strides
    return bytes(call)[_CALL_HEAD.size:]


def _mods_head(mods):
    """the head's ALiBi slopes, their batch stride, the dropout's seed and offset (0 without modifiers; the seed and
    offset taken modulo 2^64, as C's unsigned long long takes them)"""
    if mods is None:
        return 0, 0, 0, 0
    return (0 if mods[3] is None else mods[3].data_ptr()), mods[4], mods[6] & _U64, mods[7] & _U64


# The planned backward's scratch: one buffer per (device, stream), grown as needed and reused by every planned call on
# that stream, whose kernels run in stream order, so no call sees another's use of it. A scratch above
# _SCRATCH_KEPT_BYTES (long sequences' fp32 dQ sums) is allocated for its call alone, as the general path's is, and so
# is one while the stream is captured into a CUDA graph (the graph's memory pool then owns it: a kept buffer could be
# replaced, and freed, while a graph still wrote to it).
_SCRATCH_KEPT_BYTES = 16 << 20
_scratch = {}


def _planned_scratch(device, nbytes, stream):
    if nbytes > _SCRATCH_KEPT_BYTES or _stream_capturing():
        return torch.empty(max(nbytes, 16), dtype=torch.uint8, device=device)
    key = (device.index, stream)
    buf = _scratch.get(key)
    if buf is None or buf.numel() < nbytes:
        buf = _scratch[key] = torch.empty(max(nbytes, 16), dtype=torch.uint8, device=device)
    return buf


def _mods(mods):
    """(window_left, window_right, softcap, alibi_slopes, alibi_batch, dropout_p, dropout_seed, dropout_offset) as the
    library's arguments"""
    left, right, softcap, alibi, alibi_batch, dropout_p, seed, offset = mods
    return [left, right, softcap, _ptr(alibi), alibi_batch, dropout_p, seed, offset]


def _describe(B, T, Tk, H, H_kv, D, causal, layout, bias, key_lengths, gate):
    text = f"B={B} T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={int(causal)} layout={layout}"
    if bias is not None:
        text += f" bias={tuple(bias.shape)} {'fp32' if bias.dtype == torch.float32 else 'bf16'}"
    return text + (" key_lengths" if key_lengths is not None else "") + (" gate" if gate is not None else "")


# ----------------------------------------------------------------------------
# autograd

class FlashAttentionFunction(torch.autograd.Function):
    # bias (4-d, or None) is input 3, gate (out's shape, or None) input 4 and bias2 input 5: their gradients are those
    # of backward's results
    BIAS, GATE, BIAS2 = 3, 4, 5

    @staticmethod
    def forward(ctx, q, k, v, bias, gate, bias2, key_mask, causal, scale, layout, key_lengths, cu_seqlens_q, cu_seqlens_k,
                max_seqlen_q, max_seqlen_k, mods=_NO_MODS):
        q, k, v = (_ready(x, layout) for x in (q, k, v))
        B, T, H, D = _sizes(q, layout)
        _, Tk, H_kv, _ = _sizes(k, layout)
        if layout == "thd":
            B, T, Tk = cu_seqlens_q.numel() - 1, max_seqlen_q, max_seqlen_k
        if bias is not None and ctx.needs_input_grad[FlashAttentionFunction.BIAS]:
            # the library writes dbias with the bias's strides, and the backward's dbias is contiguous: so is the bias
            # it reads (a copy has the same gradient; an expanded bias gets one gradient per element, as autograd wants)
            bias = bias.contiguous()
        if bias2 is not None and ctx.needs_input_grad[FlashAttentionFunction.BIAS2]:
            bias2 = bias2.contiguous()
        out = _empty_out(q, layout)
        gated_out = None
        if gate is not None:
            # the library writes dgate with the gate's strides: the gate it reads has out's memory (a copy where the
            # given one differs), so dgate, allocated as out, has its strides
            if not (_usable(gate, layout) and _strides(gate, layout) == _strides(out, layout)):
                gate = _empty_out(gate, layout).copy_(gate)
            gated_out = _empty_out(q, layout)
        lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)  # natural log, saved for the backward
        err = _call(q.device, _library().flashgpt_attention_forward_ex,
                    q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                    _c_strides(q, layout), _c_strides(k, layout), _c_strides(v, layout), _c_strides(out, layout),
                    B, T, Tk, H, H_kv, D, int(causal), scale,
                    *_extras(bias, key_lengths, cu_seqlens_q, cu_seqlens_k, gate, layout, q, k), _ptr(gated_out),
                    *_extras2(bias2, key_mask), *_mods(mods), int(q.dtype == torch.float16))
        if err:
            raise FlashAttentionError(f"flashgpt attention forward "
                                      f"({_describe(B, T, Tk, H, H_kv, D, causal, layout, bias, key_lengths, gate)}): "
                                      f"{err.decode()}")
        # the backward reads the ungated out (it needs O), whichever of the two the call returns
        ctx.save_for_backward(q, k, v, out, lse, bias, gate, bias2, key_mask, key_lengths, cu_seqlens_q, cu_seqlens_k)
        ctx.causal, ctx.scale, ctx.layout, ctx.sizes, ctx.mods = causal, scale, layout, (B, T, Tk, H, H_kv, D), mods
        ctx.mark_non_differentiable(lse)
        return (out if gate is None else gated_out), lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, bias, gate, bias2, key_mask, key_lengths, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        causal, scale, layout, mods = ctx.causal, ctx.scale, ctx.layout, ctx.mods
        B, T, Tk, H, H_kv, D = ctx.sizes
        # d loss / d out, or with a gate d loss / d gated_out; copied where the kernels can't read it in place, e.g.
        # the expanded (all strides 0) gradient of out.sum()
        dout = _ready(dout, layout)
        dq, dk, dv = _empty_grad(q, layout), _empty_grad(k, layout), _empty_grad(v, layout)
        dbias = dbias2 = None
        if bias is not None and ctx.needs_input_grad[FlashAttentionFunction.BIAS]:
            dbias = torch.empty(bias.shape, dtype=bias.dtype, device=bias.device)
            if _bias_strides(dbias) != _bias_strides(bias):  # the forward made the bias contiguous
                raise FlashAttentionError(f"dbias strides {_bias_strides(dbias)} differ from the bias's "
                                          f"{_bias_strides(bias)}")
        if bias2 is not None and ctx.needs_input_grad[FlashAttentionFunction.BIAS2]:
            dbias2 = torch.empty(bias2.shape, dtype=bias2.dtype, device=bias2.device)
        # the library always writes dgate with a gate (the forward gave the gate out's memory, so dgate takes it too)
        dgate = None if gate is None else _empty_out(gate, layout)
        extras = _extras(bias, key_lengths, cu_seqlens_q, cu_seqlens_k, gate, layout, q, k)
        extras2 = _extras2(bias2, key_mask)
        lib = _library()
        with torch.cuda.device(q.device):
            # the extras and dbias change the scratch (dbias adds B * H * T * Tk fp32, a gate B * T * H * D bf16): the
            # query takes the backward's
            scratch_bytes = lib.flashgpt_attention_backward_scratch_bytes_ex(B, T, Tk, H, H_kv, D, int(causal), *extras,
                                                                             _ptr(dbias), *extras2, _ptr(dbias2), *_mods(mods)[:6])
            # 0 when the call is refused: the backward below says why
            scratch = torch.empty(max(scratch_bytes, 16), dtype=torch.uint8, device=q.device)
            err = lib.flashgpt_attention_backward_ex(
                dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dout.data_ptr(), q.data_ptr(), k.data_ptr(),
                v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                _c_strides(dq, layout), _c_strides(dk, layout), _c_strides(dv, layout), _c_strides(dout, layout),
                _c_strides(q, layout), _c_strides(k, layout), _c_strides(v, layout), _c_strides(out, layout),
                B, T, Tk, H, H_kv, D, int(causal), scale, *extras, _ptr(dgate), _ptr(dbias), *extras2, _ptr(dbias2),
                *_mods(mods), int(q.dtype == torch.float16), scratch.data_ptr(), scratch_bytes,
                _raw_stream(q.device.index))
        if err:
            raise FlashAttentionError(f"flashgpt attention backward "
                                      f"({_describe(B, T, Tk, H, H_kv, D, causal, layout, bias, key_lengths, gate)}): "
                                      f"{err.decode()}")
        if not ctx.needs_input_grad[FlashAttentionFunction.GATE]:
            dgate = None
        return dq, dk, dv, dbias, dgate, dbias2, None, None, None, None, None, None, None, None, None, None


# ----------------------------------------------------------------------------
# the plain call's fast path: a call with none of the extras whose q, k and v the kernels read in place is planned once
# per (shapes, strides, dtypes, causal, scale, layout, device) -- its sizes, the ctypes strides of every tensor, the
# gradients' memory, the backward's scratch size, the calls' tails -- and then costs a dict lookup, the allocations
# and one library call each way (a training loop calls the same shapes every step)

class _Plan:
    __slots__ = ("device", "args", "describe", "layout", "out_sizes", "lse_shape", "call", "grads", "scratch_bytes",
                 "dout", "given_grads", "tails", "no_extras", "no_extras2")

    def __init__(self, q, k, v, causal, scale, layout):
        B, T, H, D = _sizes(q, layout)
        _, Tk, H_kv, _ = _sizes(k, layout)
        self.device, self.layout = q.device, layout
        self.args = (B, T, Tk, H, H_kv, D, int(causal), scale, int(q.dtype == torch.float16))
        self.describe = _describe(B, T, Tk, H, H_kv, D, causal, layout, None, None, None)
        self.out_sizes, self.lse_shape = (B, T, H, D), (B, H, T)
        out = _empty_bthd(q, (B, T, H, D), layout)
        # each gradient's memory, as _grad_memory chooses it: x's own strides where x is dense (a leaf's .grad takes
        # it without a copy), else (B, T, H, D) memory; (_grad_strides, its ctypes strides)
        self.grads = []
        for x in (q, k, v):
            strides = _grad_strides(x, layout)
            g = x if strides is not None else _empty_bthd(x, _sizes(x, layout), layout)
            self.grads.append((strides, _c_strides(g, layout)))
        # the plain calls' arguments but the pointers (and the window and modifiers, where a call has them)
        self.call = _Call(B=B, T=T, Tk=Tk, NH=H, NH_kv=H_kv, HS=D, causal=int(causal),
                          fp16=int(q.dtype == torch.float16), scale=scale, window_left=-1, window_right=-1)
        for i, x in enumerate((q, k, v, out)):
            self.call.strides[i][:] = _strides(x, layout)
        self.scratch_bytes = {}  # the modifiers' scratch key -> the backward's scratch, asked at the first backward
        self.dout = {}  # dout's strides -> its ctypes strides, or None where the kernels can't read it in place
        self.given_grads = {}  # the compiled op's gradients' strides -> _given_grad_strides
        # _call_tail's bytes: the forward's by (window, softcap, dropout_p); the backward's by those, dout's strides
        # and the gradients' (None: the plan's own; else the compiled op's given_grads key)
        self.tails = {}
        # the _ex calls' extras arguments for a call without them (modifiers only)
        self.no_extras = tuple(_extras(None, None, None, None, None, layout, q, k))
        self.no_extras2 = tuple(_extras2(None, None))


_plans = {}


def _plain_plan(q, k, v, causal, scale, layout):
    """the plan of a plain call, or None where the call takes the general path (which checks and copies)"""
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, q.get_device(),
           k.get_device(), v.get_device(), causal, scale, layout)
    plan = _plans.get(key)
    if plan is None:
        if layout not in LAYOUTS or any(not isinstance(x, torch.Tensor) or x.dim() != 4 or x.dtype not in DTYPES
                                        or x.dtype != q.dtype or not x.is_cuda or x.device != q.device or not _usable(x, layout)
                                        for x in (q, k, v)):
            return None
        (B, _, _, D), (Bk, _, H_kv, Dk) = _sizes(q, layout), _sizes(k, layout)
        if k.shape != v.shape or Bk != B or Dk != D or H_kv < 1 or _sizes(q, layout)[2] % H_kv:
            return None
        if len(_plans) >= 1024:  # many shapes (generation's growing T): start over rather than grow without bound
            _plans.clear()
        plan = _plans[key] = _Plan(q, k, v, causal, scale, layout)
    return plan


def _grad_buffer(plan, x, which):
    strides, c_strides = plan.grads[which]
    g, bthd = _grad_memory(x, plan.layout, strides)
    return (_as_layout(g, plan.layout) if bthd else g), c_strides


def _plain_forward(q, k, v, plan, mods=None, out=None, lse=None):
    """out and lse of a planned call (autograd's forward, or the whole call where no gradient is wanted); mods (see
    _mods), where given, the window and modifiers. out and lse, where given (the compiled op's), have the memory this
    allocates: out (B, T, H, D), lse (B, H, T), 16-byte aligned."""
    if out is None:
        out = torch.empty(plan.out_sizes, dtype=q.dtype, device=q.device)
        if plan.layout == "bhtd":
            out = out.transpose(1, 2)
        lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=q.device)
    index = plan.device.index
    if _current_device() != index:
        with torch.cuda.device(index):
            return _plain_forward(q, k, v, plan, mods, out, lse)
    tail_key = None if mods is None else (mods[0], mods[1], mods[2], mods[5])
    tail = plan.tails.get(tail_key)
    if tail is None:
        tail = plan.tails[tail_key] = _call_tail(plan, mods)
    call = _CALL_HEAD.pack(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), 0, 0, 0, 0, 0, 0,
                           _raw_stream(index), *_mods_head(mods)) + tail
    err = _library().flashgpt_attention_forward(call)
    if err:
        raise FlashAttentionError(f"flashgpt attention forward ({plan.describe}): {err.decode()}")
    return out, lse


def _given_grad_strides(plan, dq, dk, dv, grads_bthd):
    """(key, the ctypes strides) of gradients the caller allocated (the compiled op's; grads_bthd as the op's), the
    strides None where the kernels can't write them in place (their addresses are the caller's to check); the key
    names them in plan.tails"""
    key = (grads_bthd, dq.stride(), dk.stride(), dv.stride())
    strides = plan.given_grads.get(key)
    if strides is None:
        grads = (dq, dk, dv)
        layouts = tuple("bthd" if grads_bthd >> i & 1 else plan.layout for i in range(3))
        fits = all(g.stride(-1) == 1 and all(s > 0 and s % 8 == 0 for s in _strides(g, layout))
                   for g, layout in zip(grads, layouts))
        strides = plan.given_grads[key] = (tuple(_c_strides(g, layout) for g, layout in zip(grads, layouts)) if fits
                                           else ())
    return key, strides or None


def _plain_backward(dout, q, k, v, out, lse, plan, mods=None, grads=None, grads_key=None):
    """dq, dk, dv of a planned call (mods as _plain_forward's). grads, where given (the compiled op's), are written in
    place: ((dq, its ctypes strides), (dk, ..), (dv, ..)), 16-byte aligned, grads_key their _given_grad_strides key."""
    index = plan.device.index
    if _current_device() != index:
        with torch.cuda.device(index):
            return _plain_backward(dout, q, k, v, out, lse, plan, mods, grads, grads_key)
    lib = _library()
    do_key = dout.stride()
    if do_key not in plan.dout:
        plan.dout[do_key] = _c_strides(dout, plan.layout) if _usable(dout, plan.layout) else None
    do_st = plan.dout[do_key]
    if do_st is None or dout.data_ptr() % 16:
        dout = dout.clone(memory_format=torch.contiguous_format)
        do_key, do_st = dout.stride(), _c_strides(dout, plan.layout)
    if grads is None:
        grads, grads_key = tuple(_grad_buffer(plan, x, i) for i, x in enumerate((q, k, v))), None
    (dq, dq_st), (dk, dk_st), (dv, dv_st) = grads
    # the scratch depends on the window and modifiers, not on the alibi slopes' address or the dropout's seed
    scratch_key = None if mods is None else (mods[0], mods[1], mods[2], mods[3] is None, mods[4], mods[5])
    scratch_bytes = plan.scratch_bytes.get(scratch_key)
    if scratch_bytes is None:
        if mods is None:
            scratch_bytes = lib.flashgpt_attention_backward_scratch_bytes(*plan.args[:7])
        else:
            scratch_bytes = lib.flashgpt_attention_backward_scratch_bytes_ex(*plan.args[:7], *plan.no_extras, None,
                                                                             *plan.no_extras2, None, *_mods(mods)[:6])
        plan.scratch_bytes[scratch_key] = scratch_bytes
    stream = _raw_stream(index)
    scratch = _planned_scratch(plan.device, scratch_bytes, stream)
    tail_key = (None if mods is None else (mods[0], mods[1], mods[2], mods[5]), do_key, grads_key)
    tail = plan.tails.get(tail_key)
    if tail is None:
        tail = plan.tails[tail_key] = _call_tail(plan, mods, (do_st, dq_st, dk_st, dv_st))
    call = _CALL_HEAD.pack(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
                           dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), scratch.data_ptr(), scratch_bytes, stream,
                           *_mods_head(mods)) + tail
    err = lib.flashgpt_attention_backward(call)
    if err:
        raise FlashAttentionError(f"flashgpt attention backward ({plan.describe}): {err.decode()}")
    return dq, dk, dv


class PlainAttentionFunction(torch.autograd.Function):
    """flash_attention without extras (the window and modifiers allowed), through a _Plan (FlashAttentionFunction is
    the general one)"""

    @staticmethod
    def forward(ctx, q, k, v, plan, mods):
        out, lse = _plain_forward(q, k, v, plan, mods)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan, ctx.mods = plan, mods
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return _plain_backward(dout, q, k, v, out, lse, ctx.plan, ctx.mods) + (None, None)


# ----------------------------------------------------------------------------
# torch.compile: under it a call without the extras (window, softcap, ALiBi and dropout allowed) runs as
# _CompiledAttention, an autograd.Function that Dynamo traces: its forward and backward allocate their outputs in the
# graph (Inductor's allocations, planned and cheap) and hand them to the custom ops flashgpt::attention and
# flashgpt::attention_backward, which write them in place (the backward's scratch the op allocates: its size is the
# library's, which a graph with symbolic sizes could not hold as a constant). The compiler keeps each op whole (no
# graph break at the ctypes call). The ops carry no autograd formula of their own, so the compiled graph reaches their
# Python bodies through the dispatcher without a Python autograd kernel on the way. Eager calls never go through them
# (a custom op's dispatch costs more than the call).

_OP_SCHEMAS = {
    "attention": "(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!) lse, bool causal, float scale, str layout, "
                 "int window_left, int window_right, float softcap, Tensor? alibi_slopes, float dropout_p, "
                 "int? dropout_seed) -> Tensor",
    "attention_backward": "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor(a!) dq, "
                          "Tensor(b!) dk, Tensor(c!) dv, int grads_bthd, bool causal, float scale, str layout, "
                          "int window_left, int window_right, float softcap, Tensor? alibi_slopes, float dropout_p, "
                          "Tensor dropout_seed) -> ()",
}
# The ops take and write whole tensors, never views (a view the compiler would copy back into its base): out is
# (B, T, H, D) memory whatever the layout (the caller views it as (B, H, T, D) for "bhtd"), and bit i of grads_bthd
# says that gradient i (dq, dk, dv) is such a (B, T, H, D) tensor rather than one of its input's shape.
# The forward draws the dropout seed itself where the caller gives none (from PyTorch's CPU generator, as eager calls
# do: torch.manual_seed repeats it) and returns the seed it used, a CPU int64 scalar, for the backward. A seed drawn
# in the graph instead would be a CPU tensor op, which Inductor compiles with the host's C++ compiler.


class _OpContext:
    """what FlashAttentionFunction's forward and backward read and write of autograd's context (the ops' general
    path)"""
    needs_input_grad = (True, True, True) + (False,) * 13

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        pass


def _op_mods(window_left, window_right, softcap, alibi_slopes, dropout_p, seed):
    """the ops' window and modifiers as _mods takes them, None where there are none (_mods_or_none)"""
    alibi_batch = 0 if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes.shape[1]
    return _mods_or_none((window_left, window_right, softcap, alibi_slopes, alibi_batch, dropout_p,
                          seed if dropout_p else 0, 0))


def _mods_or_none(mods):
    """None where mods has no window, softcap, ALiBi or dropout (the plan's plain calls), else mods"""
    left, right, softcap, alibi, _, dropout_p, _, _ = mods
    return None if (left, right) == (-1, -1) and not softcap and alibi is None and not dropout_p else mods


def _op_forward(q, k, v, out, lse, causal, scale, layout, window_left, window_right, softcap, alibi_slopes, dropout_p,
                dropout_seed):
    # the seed as the op returns it, a 0-d int64 CPU tensor made once (torch.scalar_tensor costs less than torch.tensor)
    if not dropout_p:
        seed, seed_tensor = 0, torch.scalar_tensor(0, dtype=torch.int64)
    elif dropout_seed is None:
        seed_tensor = _draw_dropout_seed()
        seed = int(seed_tensor)
    else:
        seed, seed_tensor = dropout_seed, torch.scalar_tensor(dropout_seed, dtype=torch.int64)
    mods = _op_mods(window_left, window_right, softcap, alibi_slopes, dropout_p, seed)
    plan = _plain_plan(q, k, v, causal, scale, layout)
    if plan is not None and (q.data_ptr() | k.data_ptr() | v.data_ptr() | out.data_ptr()) % 16 == 0:
        _plain_forward(q, k, v, plan, mods, out, lse)   # (the plan's out strides are out's memory)
    else:   # the general path (it copies what the kernels can't read)
        T, Tk = _sizes(q, layout)[1], _sizes(k, layout)[1]
        o, l = FlashAttentionFunction.forward(_OpContext(), q, k, v, None, None, None, None, causal, scale, layout,
                                              None, None, None, T, Tk, mods or _NO_MODS)
        _as_layout(out, layout).copy_(o)
        lse.copy_(l)
    return seed_tensor


def _op_backward(dout, q, k, v, out, lse, dq, dk, dv, grads_bthd, causal, scale, layout, window_left, window_right,
                 softcap, alibi_slopes, dropout_p, dropout_seed):
    mods = _op_mods(window_left, window_right, softcap, alibi_slopes, dropout_p,
                    dropout_seed.item() if dropout_p else 0)
    plan = _plain_plan(q, k, v, causal, scale, layout)
    if plan is not None:
        grads_key, strides = _given_grad_strides(plan, dq, dk, dv, grads_bthd)
        if (strides is not None and (q.data_ptr() | k.data_ptr() | v.data_ptr() | out.data_ptr() | dq.data_ptr()
                                     | dk.data_ptr() | dv.data_ptr()) % 16 == 0):
            _plain_backward(dout, q, k, v, out, lse, plan, mods,
                            ((dq, strides[0]), (dk, strides[1]), (dv, strides[2])), grads_key)
            return
    ctx = _OpContext()
    B, T, H, D = _sizes(q, layout)
    _, Tk, H_kv, _ = _sizes(k, layout)
    ctx.causal, ctx.scale, ctx.layout, ctx.sizes = causal, scale, layout, (B, T, Tk, H, H_kv, D)
    ctx.mods = mods or _NO_MODS
    ctx.saved_tensors = (q, k, v, _as_layout(out, layout), lse) + (None,) * 7
    for i, (g, x) in enumerate(zip((dq, dk, dv), FlashAttentionFunction.backward(ctx, dout, None)[:3])):
        (_as_layout(g, layout) if grads_bthd >> i & 1 else g).copy_(x)


class _CompiledAttention(torch.autograd.Function):
    """flash_attention under torch.compile (see above): the outputs allocated here, written by the ops"""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, left, right, softcap, alibi_slopes, dropout_p, dropout_seed):
        B, T, H, D = _sizes(q, layout)
        out = q.new_empty((B, T, H, D))
        lse = q.new_empty((B, H, T), dtype=torch.float32)
        seed = torch.ops.flashgpt.attention(q, k, v, out, lse, causal, scale, layout, left, right, softcap,
                                            alibi_slopes, dropout_p, dropout_seed)
        if alibi_slopes is None:
            ctx.save_for_backward(q, k, v, out, lse, seed)
        else:
            ctx.save_for_backward(q, k, v, out, lse, seed, alibi_slopes)
        ctx.args = (causal, scale, layout, left, right, softcap, dropout_p)
        # the gradients' strides, read here: the backward must read no tensor's strides (see _grad_memory)
        ctx.grad_strides = (_grad_strides(q, layout), _grad_strides(k, layout), _grad_strides(v, layout))
        ctx.mark_non_differentiable(lse)
        return _as_layout(out, layout), lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, seed = ctx.saved_tensors[:6]
        alibi_slopes = ctx.saved_tensors[6] if len(ctx.saved_tensors) > 6 else None
        causal, scale, layout, left, right, softcap, dropout_p = ctx.args
        # (no generator expression here: PyTorch 2.15's Dynamo fails on one unpacked in a traced backward)
        dq_strides, dk_strides, dv_strides = ctx.grad_strides
        (dq, dq_bthd), (dk, dk_bthd) = _grad_memory(q, layout, dq_strides), _grad_memory(k, layout, dk_strides)
        dv, dv_bthd = _grad_memory(v, layout, dv_strides)
        grads_bthd = int(dq_bthd) | int(dk_bthd) << 1 | int(dv_bthd) << 2
        torch.ops.flashgpt.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, grads_bthd, causal, scale, layout,
                                              left, right, softcap, alibi_slopes, dropout_p, seed)
        return (_as_layout(dq, layout) if dq_bthd else dq, _as_layout(dk, layout) if dk_bthd else dk,
                _as_layout(dv, layout) if dv_bthd else dv) + (None,) * 9


def _register_compile_ops():
    """flashgpt::attention and flashgpt::attention_backward with their fake implementations (they write the memory
    they are given; the forward returns its seed). They are defined through torch.library.Library (define / impl)
    rather than torch.library.custom_op, whose per-call checks and wrappers cost more host time than the call itself."""
    library = torch.library.Library("flashgpt", "DEF")
    for name, schema in _OP_SCHEMAS.items():   # (the forward draws a seed: the compiler must neither merge nor drop it)
        library.define(name + schema, tags=(torch.Tag.nondeterministic_seeded,) if name == "attention" else ())
    library.impl("attention", _op_forward, "CUDA")
    library.impl("attention_backward", _op_backward, "CUDA")
    torch.library.register_fake("flashgpt::attention", lambda *args: torch.empty((), dtype=torch.int64), lib=library)
    torch.library.register_fake("flashgpt::attention_backward", lambda *args: None, lib=library)
    return library


# (the Library object must live as long as the ops: it unregisters them when collected)
_op_library = _register_compile_ops() if hasattr(getattr(torch, "library", None), "register_fake") else None


# ----------------------------------------------------------------------------
# the call

def _int32_on(x, name, device):
    """a 1-d integer tensor as the library reads it: contiguous int32 on q's device"""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype.is_floating_point or x.dtype.is_complex \
            or x.dtype == torch.bool:
        raise TypeError(f"{name} must be a 1-d integer tensor (int32 on q's device passes without a copy)")
    return x.to(device=device, dtype=torch.int32).contiguous()


def _bias_4d(bias, shape, device):
    """bias as the library reads it: 4-d (leading dims of size 1 added), broadcastable to shape = (B, H, T, Tk), keys
    contiguous (a key dim of size 1 expanded to Tk). Autograd sees these steps, so bias's gradient flows back through
    them."""
    if not isinstance(bias, torch.Tensor) or bias.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"bias must be a bfloat16, float16 or float32 tensor, not {getattr(bias, 'dtype', type(bias))}")
    if bias.dtype == torch.float16:  # the kernels read bf16 or fp32 biases: fp16 values are exact in fp32
        bias = bias.float()
    if bias.device != device:
        raise ValueError(f"bias must be on q's device {device}, not {bias.device}")
    try:
        fits = bias.dim() <= 4 and torch.broadcast_shapes(bias.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"bias {tuple(bias.shape)} does not broadcast to (B, H, T, Tk) = {shape}")
    bias = bias[(None,) * (4 - bias.dim())]
    if bias.shape[3] != shape[3]:
        bias = bias.expand(*bias.shape[:3], shape[3])
    if bias.shape[3] > 1 and bias.stride(3) != 1:
        bias = bias.contiguous()
    return bias


def _key_mask_2d(key_mask, B, Tk, device):
    """a key mask (B or 1, Tk) / (Tk,), bool or integer, as the library reads it: uint8 rows of Tk on q's device"""
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype.is_floating_point or key_mask.dtype.is_complex:
        raise TypeError("key_mask must be a bool (or integer) tensor: True where the key is seen")
    m = key_mask.reshape(1, -1) if key_mask.dim() == 1 else key_mask
    if m.dim() != 2 or m.shape[1] != Tk or m.shape[0] not in (1, B):
        raise ValueError(f"key_mask {tuple(key_mask.shape)} must be (B, Tk) = ({B}, {Tk}), (1, Tk) or (Tk,)")
    return (m != 0).to(device=device, dtype=torch.uint8).contiguous()


def flash_attention(q, k, v, causal=True, scale=None, layout="bhtd", bias=None, key_lengths=None,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                    cu_seqlens=None, max_seqlen=None, gate=None, bias2=None, key_mask=None, return_lse=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=None):
    """softmax(scale * q k^T + bias + bias2, masks) v, times gate when given; scale defaults to 1 / sqrt(D). See the
    module docstring for shapes and for the extras (bias, bias2, key_mask, key_lengths, packed sequences, gate).
    window_size (left, right): FlashAttention's sliding window, query i sees keys i + Tk - T - left .. i + Tk - T +
    right (per sequence), -1 leaving a side unbounded; causal sets right to 0.
    softcap > 0: the scores capped, softcap * tanh(scale q.k / softcap) (not with bias, bias2 or key_mask).
    alibi_slopes (H,) or (B, H) fp32: ALiBi, -slope * |i + Tk - T - j| added to each score (FlashAttention's).
    dropout_p > 0: dropout on the probabilities (FlashAttention's), its mask a function of dropout_seed (drawn from
    PyTorch's CPU generator where not given, so torch.manual_seed repeats it) and (b, h, i, j); the backward
    recomputes it (dropout_mask gives it). Not with softcap.
    return_lse: (out, lse), lse (B, H, T) fp32 the natural-log softmax denominators (packed: T the longest sequence,
    sequence b's rows first; -inf where a row sees no key), no gradient."""
    window = (int(window_size[0]), int(window_size[1]))
    if window[0] < -1 or window[1] < -1:
        raise ValueError(f"window_size entries must be -1 (unbounded) or at least 0, not {tuple(window_size)}")
    if (_op_library is not None and _compiling() and bias is None and key_lengths is None and cu_seqlens_q is None
            and cu_seqlens_k is None and cu_seqlens is None and gate is None and bias2 is None and key_mask is None
            and layout in LAYOUTS):   # torch.compile tracing: _CompiledAttention and its ops (see above it)
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[3])
        if alibi_slopes is not None:
            alibi_slopes = alibi_slopes.to(device=q.device, dtype=torch.float32).contiguous()
        # the dropout seed: the caller's, else None and the op draws one each call (an int drawn here would be a
        # constant of the graph)
        seed = None if dropout_seed is None or not dropout_p else int(dropout_seed)
        out, lse = _CompiledAttention.apply(q, k, v, bool(causal), float(scale), layout, window[0], window[1],
                                            float(softcap), alibi_slopes, float(dropout_p), seed)
        return (out, lse) if return_lse else out
    if (bias is None and key_lengths is None and cu_seqlens_q is None and cu_seqlens_k is None and cu_seqlens is None
            and gate is None and bias2 is None and key_mask is None and max_seqlen is None and max_seqlen_q is None
            and max_seqlen_k is None):
        if scale is None and isinstance(q, torch.Tensor) and q.dim() == 4:
            scale = 1.0 / math.sqrt(q.shape[3])
        plan = _plain_plan(q, k, v, bool(causal), None if scale is None else float(scale), layout)
        if plan is not None and (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16 == 0:
            B, H = plan.args[0], plan.args[3]
            mods = _call_mods(window, softcap, alibi_slopes, dropout_p, dropout_seed, B, H, q.device)
            if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
                out, lse = PlainAttentionFunction.apply(q, k, v, plan, mods)
            else:
                out, lse = _plain_forward(q, k, v, plan, mods)  # inference: no autograd node to build
            return (out, lse) if return_lse else out
    if cu_seqlens is not None or max_seqlen is not None:
        if any(x is not None for x in (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)):
            raise ValueError("give cu_seqlens / max_seqlen (one for q and k) or cu_seqlens_q, cu_seqlens_k / "
                             "max_seqlen_q, max_seqlen_k, not both")
        cu_seqlens_q = cu_seqlens_k = cu_seqlens
        max_seqlen_q = max_seqlen_k = max_seqlen
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    if packed:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("packed sequences need both cu_seqlens_q and cu_seqlens_k")
        if key_lengths is not None:
            raise ValueError("packed sequences take their key lengths from cu_seqlens_k, not key_lengths")
        layout = "thd"
    elif layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    dims = 3 if packed else 4
    what = {"bhtd": "B, H, T, D", "bthd": "B, T, H, D", "thd": "total, H, D"}[layout]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != dims:
            packed_like = not packed and isinstance(x, torch.Tensor) and x.dim() == 3
            hint = " (3-d packed sequences need cu_seqlens)" if packed_like else ""
            raise ValueError(f"{name} must be a {dims}-d tensor ({what}){hint}")
        if x.dtype not in DTYPES or x.dtype != q.dtype or not x.is_cuda:
            raise TypeError(f"{name} must be a bfloat16 or float16 CUDA tensor of q's dtype, not {x.dtype} on {x.device}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, not {q.device}, {k.device}, {v.device}")
    (B, T, H, D), (Bk, Tk, _, Dk) = _sizes(q, layout), _sizes(k, layout)
    if k.shape != v.shape or Bk != B or Dk != D:
        raise ValueError(f"k and v must have one shape, with q's batch and head dim: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)} ({layout})")
    if packed:
        cu_seqlens_q = _int32_on(cu_seqlens_q, "cu_seqlens_q", q.device)
        cu_seqlens_k = _int32_on(cu_seqlens_k, "cu_seqlens_k", q.device)
        if cu_seqlens_q.numel() < 2 or cu_seqlens_k.numel() != cu_seqlens_q.numel():
            raise ValueError(f"cu_seqlens_q and cu_seqlens_k must both have B + 1 >= 2 elements, not "
                             f"{cu_seqlens_q.numel()} and {cu_seqlens_k.numel()}")
        # the longest sequences, read back from the device (a synchronisation) when not given
        longest = lambda cu: int((cu[1:] - cu[:-1]).max().item())  # noqa: E731
        T = int(max_seqlen_q) if max_seqlen_q is not None else longest(cu_seqlens_q)
        Tk = int(max_seqlen_k) if max_seqlen_k is not None else longest(cu_seqlens_k)
        B = cu_seqlens_q.numel() - 1
    if key_lengths is not None:
        key_lengths = _int32_on(key_lengths, "key_lengths", q.device)
        if key_lengths.numel() != B:
            raise ValueError(f"key_lengths must have B = {B} elements, not {key_lengths.numel()}")
    if bias is not None:
        bias = _bias_4d(bias, (B, H, T, Tk), q.device)
    if bias2 is not None:
        bias2 = _bias_4d(bias2, (B, H, T, Tk), q.device)
    if key_mask is not None:
        key_mask = _key_mask_2d(key_mask, B, Tk, q.device)
    if gate is not None:
        if not isinstance(gate, torch.Tensor) or gate.dtype != q.dtype or gate.device != q.device:
            raise TypeError(f"gate must be a {q.dtype} tensor (q's dtype) on q's device {q.device}, not "
                            f"{getattr(gate, 'dtype', type(gate))} on {getattr(gate, 'device', '-')}")
        if gate.shape != q.shape:
            raise ValueError(f"gate {tuple(gate.shape)} must have out's shape, q's {tuple(q.shape)} ({layout})")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    mods = _call_mods(window, softcap, alibi_slopes, dropout_p, dropout_seed, B, H, q.device)
    out, lse = FlashAttentionFunction.apply(q, k, v, bias, gate, bias2, key_mask, bool(causal), float(scale), layout,
                                            key_lengths, cu_seqlens_q if packed else None,
                                            cu_seqlens_k if packed else None, T, Tk, _NO_MODS if mods is None else mods)
    return (out, lse) if return_lse else out


def _call_mods(window, softcap, alibi_slopes, dropout_p, dropout_seed, B, H, device):
    """a call's window and modifiers as FlashAttentionFunction and the plan take them (see _mods), None without any;
    the ALiBi slopes checked and made contiguous fp32 on device, the dropout seed drawn where not given"""
    dropout_p = float(dropout_p)
    alibi_batch = 0
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or tuple(alibi_slopes.shape) not in ((H,), (B, H)):
            raise ValueError(f"alibi_slopes must be a ({H},) or ({B}, {H}) tensor, not "
                             f"{tuple(getattr(alibi_slopes, 'shape', ()))}")
        alibi_slopes = alibi_slopes.to(device=device, dtype=torch.float32).contiguous()
        alibi_batch = H if alibi_slopes.dim() == 2 else 0
    if dropout_p and dropout_seed is None:
        dropout_seed = new_dropout_seed()
    return _mods_or_none((window[0], window[1], float(softcap), alibi_slopes, alibi_batch, dropout_p,
                          int(dropout_seed or 0), 0))


def _draw_dropout_seed():
    """a dropout seed from PyTorch's CPU generator (no device synchronisation; torch.manual_seed repeats it), as a
    0-d int64 CPU tensor"""
    return torch.randint(0, 2 ** 62, (), dtype=torch.int64)


def new_dropout_seed():
    """a dropout seed from PyTorch's CPU generator, as an int (see _draw_dropout_seed)"""
    return int(_draw_dropout_seed())


def dropout_mask(B, H, T, Tk, dropout_p, dropout_seed, device, cu_seqlens_q=None, cu_seqlens_k=None, dropout_offset=0):
    """the dropout's keep mask of a call (B, H, T, Tk) bool on device: True where probability (b, h, i, j) is kept
    (with cu_seqlens, (i, j) within sequence b, False past its lengths)"""
    device = torch.device(device)
    if device.index is None:
        device = torch.device(device.type, torch.cuda.current_device())
    mask = torch.empty((B, H, T, Tk), dtype=torch.uint8, device=device)
    cu_q = None if cu_seqlens_q is None else _int32_on(cu_seqlens_q, "cu_seqlens_q", device)
    cu_k = None if cu_seqlens_k is None else _int32_on(cu_seqlens_k, "cu_seqlens_k", device)
    err = _call(device, _library().flashgpt_attention_dropout_mask, mask.data_ptr(), B, H, T, Tk, _ptr(cu_q),
                _ptr(cu_k), float(dropout_p), int(dropout_seed), int(dropout_offset))
    if err:
        raise FlashAttentionError(f"flashgpt dropout mask: {err.decode()}")
    return mask.bool()


# ----------------------------------------------------------------------------
# attention against a KV cache (FlashAttention's flash_attn_with_kvcache)

def kvcache_attention(q, k_cache, v_cache, k_new=None, v_new=None, cache_seqlens=None, causal=False, scale=None,
                      cache_batch_idx=None, cache_leftpad=None, block_table=None, rotary_cos=None, rotary_sin=None,
                      rotary_interleaved=True, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, num_splits=0,
                      return_lse=False, out=None, cu_seqlens_q=None, max_seqlen_q=None):
    """q (B, T, H, D) new queries against the caches k_cache, v_cache: (B_cache, Tk, H_kv, D), or with block_table
    (B, max_pages) int32 paged (pages, page_size, H_kv, D). k_new, v_new (B, T_new, H_kv, D): appended into the caches
    in place at positions cache_seqlens[b] .. (K with the rotary embedding) by the same kernel that then attends to
    them. cache_seqlens: an int or (B,) int, the keys in each cache before the call (None: the cache's length less
    T_new). cache_batch_idx (B,): the cache row each sequence reads; cache_leftpad (B,): each sequence's first key.
    rotary_cos, rotary_sin (positions, rotary_dim / 2): the rotary embedding of the new keys at their positions and of
    q (at cache_seqlens + t where causal or windowed, else all at cache_seqlens), interleaved (GPT-J) or not (GPT-NeoX).
    Causal, window_size, softcap and alibi_slopes as flash_attention, aligned to each sequence's end. bf16 or fp16,
    D a multiple of 8 up to 256. Returns out (B, T, H, D) (and the LSE (B, H, T) fp32 with return_lse); out: a
    contiguous (B, T, H, D) tensor to write it into (else a new one). cu_seqlens_q (B + 1,): packed queries, q (total_q,
    H, D) and out like it, max_seqlen_q the longest (read from cu_seqlens_q when not given), no append; the LSE is then
    (B, H, max_seqlen_q), the first T_b rows of each sequence written."""
    packed = cu_seqlens_q is not None
    if q.dim() != (3 if packed else 4) or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError("q (B, T, H, D) (packed: (total_q, H, D)), k_cache and v_cache 4-d")
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError("q, k_cache and v_cache must be bf16 or fp16, all alike")
    if packed:
        cu_q = _int32_on(cu_seqlens_q, "cu_seqlens_q", q.device)
        B, H, D = cu_q.numel() - 1, q.shape[1], q.shape[2]
        T = int((cu_q[1:] - cu_q[:-1]).max()) if max_seqlen_q is None else int(max_seqlen_q)
    else:
        cu_q = None
        B, T, H, D = q.shape
    H_kv = k_cache.shape[2]
    device = q.device
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not _usable(x, "bthd") and x.shape[0] > 0:
            raise ValueError(f"{name} must have its head dim contiguous, strides multiples of 8 and 16-byte alignment "
                             "(it is read and written in place)")
    paged = block_table is not None
    if paged:
        block_table = block_table.to(device=device, dtype=torch.int32).contiguous()
        page_size = k_cache.shape[1]
        Tk = block_table.shape[1] * page_size
        table_batch = block_table.shape[1]
    else:
        page_size, Tk, table_batch = 0, k_cache.shape[1], 0
    T_new = 0
    if k_new is not None or v_new is not None:
        if k_new is None or v_new is None:
            raise ValueError("k_new and v_new come together")
        k_new, v_new = _ready(k_new.to(q.dtype), "bthd"), _ready(v_new.to(q.dtype), "bthd")
        T_new = k_new.shape[1]
    if isinstance(cache_seqlens, torch.Tensor):
        seqlens, seqlen = _int32_on(cache_seqlens, "cache_seqlens", device), 0
    else:
        seqlens, seqlen = None, Tk - T_new if cache_seqlens is None else int(cache_seqlens)
    batch_idx = None if cache_batch_idx is None else _int32_on(cache_batch_idx, "cache_batch_idx", device)
    leftpad = None if cache_leftpad is None else _int32_on(cache_leftpad, "cache_leftpad", device)
    rotary_dim = 0
    if rotary_cos is not None:
        rotary_cos = rotary_cos.to(device=device, dtype=q.dtype).contiguous()
        rotary_sin = rotary_sin.to(device=device, dtype=q.dtype).contiguous()
        rotary_dim = 2 * rotary_cos.shape[1]
    layout = "thd" if packed else "bthd"
    q = _ready(q, layout)
    if out is None:
        # packed: zeros, as flash_attention's (rows past the last sequence, if q has any, are not written)
        out = (torch.zeros(q.shape, dtype=q.dtype, device=device) if packed else
               torch.empty((B, T, H, D), dtype=q.dtype, device=device))
    elif out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor of q's shape and dtype")
    lse = torch.empty((B, H, T), dtype=torch.float32, device=device) if return_lse else None
    alibi_batch = 0
    if alibi_slopes is not None:
        alibi_slopes = alibi_slopes.to(device=device, dtype=torch.float32).contiguous()
        alibi_batch = H if alibi_slopes.dim() == 2 and alibi_slopes.shape[0] > 1 else 0
    left, right = (int(w) for w in window_size)
    per_token = bool(causal) or 0 <= left < Tk or 0 <= right < Tk
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    cache_strides = [_c_strides(x, "bthd") for x in (k_cache, v_cache)]
    new_strides = [None, None] if k_new is None else [_c_strides(x, "bthd") for x in (k_new, v_new)]
    err = _call(device, _library().flashgpt_attention_kvcache, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                out.data_ptr(), _ptr(lse), _c_strides(q, layout), *cache_strides, _c_strides(out, layout), B, T, Tk, H,
                H_kv, D, int(bool(causal)), scale, _ptr(cu_q), _ptr(seqlens), seqlen, _ptr(batch_idx), _ptr(leftpad),
                _ptr(block_table), table_batch, page_size, _ptr(k_new), _ptr(v_new), *new_strides, T_new,
                _ptr(rotary_cos), _ptr(rotary_sin), rotary_dim, int(bool(rotary_interleaved)), int(per_token), left,
                right, float(softcap), _ptr(alibi_slopes), alibi_batch, int(num_splits), int(q.dtype == torch.float16))
    if err:
        raise FlashAttentionError(f"flashgpt KV-cache attention (B={B} T={T} Tk={Tk} H={H} H_kv={H_kv} D={D}): "
                                  f"{err.decode()}")
    return (out, lse) if return_lse else out


# ----------------------------------------------------------------------------
# AlphaFold-family attention with the conventions of NVIDIA's cuEquivariance and DeepSpeed's DS4Sci_EvoformerAttention

def triangle_attention(q, k, v, bias, mask=None, scale=None):
    """cuequivariance_torch.triangle_attention's call: q, k, v (B, N, H, Q, D) and (B, N, H, K, D) bf16, bias
    (B, 1, H, Q, K) (shared by the N rows of each batch; bf16 or fp32, with autograd), mask (B, N, 1, 1, K) bool (True:
    the key is seen). Returns (B, N, H, Q, D). A row whose keys are all masked gives 0 (cuEquivariance's -1e9 logits
    give the mean of v there); any other row is the same softmax."""
    if q.dim() != 5 or k.dim() != 5 or v.dim() != 5:
        raise ValueError("q, k, v must be 5-d: (B, N, H, Q, D) and (B, N, H, K, D)")
    B, N, H, Q, D = q.shape
    K = k.shape[3]
    if bias.dim() != 5 or bias.shape[1] != 1 or bias.shape[0] not in (1, B) or bias.shape[2:] != (H, Q, K):
        raise ValueError(f"bias {tuple(bias.shape)} must be (B, 1, H, Q, K) = ({B}, 1, {H}, {Q}, {K})")
    if mask is not None and (mask.dim() != 5 or mask.shape[2:4] != (1, 1) or mask.shape[4] != K or
                             mask.shape[0] not in (1, B) or mask.shape[1] not in (1, N)):
        raise ValueError(f"mask {tuple(mask.shape)} must be (B, N, 1, 1, K) = ({B}, {N}, 1, 1, {K})")
    outs = []
    for b in range(B):   # the bias is shared by the N rows of one batch: one call per batch (AlphaFold's B is 1)
        mb = None if mask is None else mask[b if mask.shape[0] > 1 else 0].reshape(mask.shape[1], K)
        outs.append(flash_attention(q[b], k[b], v[b], causal=False, scale=scale, layout="bhtd", bias=bias[b if bias.shape[0] > 1 else 0],
                                    key_mask=mb))
    return outs[0].unsqueeze(0) if B == 1 else torch.stack(outs)


def evoformer_attention(q, k, v, biases):
    """DeepSpeed's DS4Sci_EvoformerAttention(Q, K, V, biases): q, k, v (B, N, L, H, D) bf16, biases a list of up to
    two tensors that broadcast to (B, N, H, L, L): AlphaFold's mask bias (B, N, 1, 1, L) and pair bias (B, 1, H, L, L),
    bf16 or fp32, with autograd. Scale 1 / sqrt(D). Returns (B, N, L, H, D)."""
    if q.dim() != 5:
        raise ValueError("q, k, v must be 5-d: (B, N, L, H, D)")
    if len(biases) > 2:
        raise ValueError("evoformer_attention takes at most two biases")
    B, N, L, H, D = q.shape
    Lk = k.shape[2]
    for x in biases:
        if x.dim() != 5 or x.shape[0] not in (1, B) or x.shape[2] not in (1, H) or x.shape[3] not in (1, L) or \
                x.shape[4] != Lk or x.shape[1] not in (1, N):
            raise ValueError(f"bias {tuple(x.shape)} does not broadcast to (B, N, H, L, Lk) = ({B}, {N}, {H}, {L}, {Lk})")
    outs = []
    for b in range(B):   # a bias shared by the N rows of one batch is one call's broadcast batch dimension
        bs = [x[b if x.shape[0] > 1 else 0] for x in biases]   # (N or 1, H or 1, L or 1, Lk)
        outs.append(flash_attention(q[b], k[b], v[b], causal=False, layout="bthd", bias=bs[0] if bs else None,
                                    bias2=bs[1] if len(bs) > 1 else None))
    return outs[0].unsqueeze(0) if B == 1 else torch.stack(outs)
