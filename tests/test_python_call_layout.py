#!/usr/bin/env python3
"""python/flashgpt_attention.py's plain calls against src/attention_capi.h, without a GPU.

The module hands the library each planned call as the bytes of a FlashgptAttentionCall (a head packed per call, a tail
the plan keeps per modifier set). Here a stub library, compiled with the C compiler from the real header, records every
field of the calls it receives by name, and each field is checked against what the module was given: the tensors'
addresses and strides, the shapes, scale, window and modifiers, the stream. CPU tensors stand in for CUDA ones (the
library only sees addresses); the calls go through the module's plan functions and the compiled ops' bodies.

  python3 tests/test_python_call_layout.py

Prints PASS / FAIL lines; SKIP where PyTorch or a C compiler is missing.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the stub: the plain calls record their fields (its own translation unit, with the header); the other entry points
# the module looks up return at once (a second unit without the header, so their long signatures need no copy)
RECORDER = r"""
#include <stdint.h>
#include "attention_capi.h"
long long recorded[64];   // see FIELDS in the test
float recorded_floats[3];
static const char* record(const FlashgptAttentionCall* c) {
    const void* ptrs[12] = {c->q, c->k, c->v, c->out, c->lse, c->dout, c->dq, c->dk, c->dv, c->scratch, c->stream, c->alibi_slopes};
    const long long* strides[8] = {c->q_strides, c->k_strides, c->v_strides, c->o_strides, c->do_strides, c->dq_strides,
                                   c->dk_strides, c->dv_strides};
    int n = 0;
    for (int i = 0; i < 12; i++) recorded[n++] = (long long)(uintptr_t)ptrs[i];
    recorded[n++] = (long long)c->scratch_bytes; recorded[n++] = c->alibi_batch;
    recorded[n++] = (long long)c->dropout_seed; recorded[n++] = (long long)c->dropout_offset;
    for (int i = 0; i < 8; i++) for (int j = 0; j < 3; j++) recorded[n++] = strides[i][j];
    const int ints[10] = {c->B, c->T, c->Tk, c->NH, c->NH_kv, c->HS, c->causal, c->fp16, c->window_left, c->window_right};
    for (int i = 0; i < 10; i++) recorded[n++] = ints[i];
    recorded_floats[0] = c->scale; recorded_floats[1] = c->softcap; recorded_floats[2] = c->dropout_p;
    return 0;
}
FLASHGPT_API const char* flashgpt_attention_forward(const FlashgptAttentionCall* c) { return record(c); }
FLASHGPT_API const char* flashgpt_attention_backward(const FlashgptAttentionCall* c) { return record(c); }
FLASHGPT_API size_t flashgpt_attention_backward_scratch_bytes(int B, int T, int Tk, int NH, int NH_kv, int HS, int causal) {
    return 4096;
}
FLASHGPT_API int flashgpt_attention_abi(void) { return FLASHGPT_ATTENTION_ABI; }
FLASHGPT_API const char* flashgpt_attention_version(void) { return "stub"; }
"""
OTHERS = r"""
#include <stddef.h>
size_t flashgpt_attention_backward_scratch_bytes_ex(void) { return 8192; }
const char* flashgpt_attention_forward_ex(void) { return "not in the stub"; }
const char* flashgpt_attention_backward_ex(void) { return "not in the stub"; }
const char* flashgpt_attention_dropout_mask(void) { return "not in the stub"; }
const char* flashgpt_attention_kvcache(void) { return "not in the stub"; }
int flashgpt_attention_padded_head_dim_limit(void) { return 0; }
"""
FIELDS = (["q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "scratch", "stream", "alibi_slopes", "scratch_bytes",
           "alibi_batch", "dropout_seed", "dropout_offset"] +
          [f"{t}_strides" for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv")] +
          ["B", "T", "Tk", "NH", "NH_kv", "HS", "causal", "fp16", "window_left", "window_right"])
STREAM = 0x5151

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(f"{'PASS' if ok else 'FAIL'}: {name}{'' if ok else ': ' + detail}")


def build_stub(work):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    for name, text in (("recorder.c", RECORDER), ("others.c", OTHERS)):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    lib = os.path.join(work, "libstub.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-I", os.path.join(REPO, "src"), "-o", lib,
                    os.path.join(work, "recorder.c"), os.path.join(work, "others.c")], check=True)
    return lib


def main():
    try:
        import torch
    except ImportError:
        print("SKIP: the Python call layout test needs PyTorch")
        return 0
    with tempfile.TemporaryDirectory() as work:
        lib_path = build_stub(work)
        if lib_path is None:
            print("SKIP: the Python call layout test needs a C compiler")
            return 0
        os.environ["FLASHGPT_ATTENTION_LIB"] = lib_path
        sys.path.insert(0, os.path.join(REPO, "python"))
        import flashgpt_attention as fa
        stub = ctypes.CDLL(lib_path)
        recorded = (ctypes.c_longlong * 64).in_dll(stub, "recorded")
        recorded_floats = (ctypes.c_float * 3).in_dll(stub, "recorded_floats")
        # the CPU in the GPU's place: no device to switch to, a made-up stream, never capturing
        fa._current_device = lambda: None
        fa._raw_stream = lambda index: STREAM
        fa._stream_capturing = lambda: False
        run(torch, fa, recorded, recorded_floats)
    print(f"python call layout tests: {passed} passed, {failed} failed")
    return 1 if failed else 0


def layout_strides(x, layout):
    """(batch, row, head) strides of a (B, H, T, D) "bhtd" or (B, T, H, D) "bthd" tensor with no dim of size 1"""
    s = x.stride()
    return [s[0], s[2], s[1]] if layout == "bhtd" else [s[0], s[1], s[2]]


def run(torch, fa, recorded, recorded_floats):
    def got():
        fields = {name: recorded[i] for i, name in enumerate(FIELDS[:16])}
        for i, name in enumerate(FIELDS[16:24]):
            fields[name] = list(recorded[16 + 3 * i:19 + 3 * i])
        fields.update({name: recorded[40 + i] for i, name in enumerate(FIELDS[24:])})
        fields["scale"], fields["softcap"], fields["dropout_p"] = (round(recorded_floats[i], 6) for i in range(3))
        return fields

    problems = []   # of the current shape and modifier set: one PASS / FAIL line each

    def compare(name, want):
        have = got()
        problems.extend(f"{name}: {k} {have[k]} (want {v})" for k, v in want.items() if have[k] != v)

    alibi_h = torch.rand(6)
    alibi_bh = torch.rand(2, 6)
    # (window_left, window_right, softcap, alibi_slopes, alibi_batch, dropout_p, dropout_seed, dropout_offset): _mods
    mod_sets = {"none": None, "window 128/0": (128, 0, 0.0, None, 0, 0.0, 0, 0),
                "window 64/16": (64, 16, 0.0, None, 0, 0.0, 0, 0), "window 128/32": (128, 32, 0.0, None, 0, 0.0, 0, 0),
                "softcap 30": (-1, -1, 30.0, None, 0, 0.0, 0, 0), "alibi (H)": (-1, -1, 0.0, alibi_h, 0, 0.0, 0, 0),
                "alibi (B, H)": (-1, -1, 0.0, alibi_bh, 6, 0.0, 0, 0),
                "dropout 0.2": (-1, -1, 0.0, None, 0, 0.2, 2 ** 61 + 5, 0),
                "window, alibi, dropout": (256, 0, 0.0, alibi_h, 0, 0.1, 12345, 0),
                "dropout, a negative seed": (-1, -1, 0.0, None, 0, 0.2, -5, 0)}
    planned = fa._plain_plan   # (CPU tensors are never planned: the ops' bodies get the test's plan)
    shapes = [("bhtd", torch.bfloat16, 2, 96, 96, 6, 6, 64, True),     # nanoGPT's views of a fused qkv
              ("bthd", torch.float16, 2, 40, 72, 6, 2, 128, False),  # cross, GQA
              ("bhtd", torch.bfloat16, 3, 33, 50, 4, 1, 32, True)]   # MQA
    for layout, dtype, B, T, Tk, H, H_kv, D, causal in shapes:
        tag = f"{layout} {str(dtype)[6:]} B={B} T={T} Tk={Tk} H={H}/{H_kv} D={D} causal={int(causal)}"
        plan = None   # one plan for the shape, as the module keeps it: its calls' tails for every modifier set
        for mods_name, mods in mod_sets.items():
            problems.clear()
            for repeat in range(2):   # the second call reads the plan's kept tails, with other tensors
                if layout == "bhtd":
                    qkv = torch.randn(B, T, (H + 2 * H_kv) * D, dtype=dtype)
                    q = qkv[..., :H * D].view(B, T, H, D).transpose(1, 2)
                    k = torch.randn(B, Tk, H_kv, D, dtype=dtype).transpose(1, 2)
                    v = torch.randn(B, Tk, H_kv, D, dtype=dtype).transpose(1, 2)
                    dout = torch.randn(B, T, H, D, dtype=dtype).transpose(1, 2)
                else:
                    q = torch.randn(B, T, H, D, dtype=dtype)
                    k, v = torch.randn(B, Tk, H_kv, D, dtype=dtype), torch.randn(B, Tk, H_kv, D, dtype=dtype)
                    dout = torch.randn(B, T, H, D, dtype=dtype)
                plan = plan or fa._Plan(q, k, v, causal, 0.125, layout)
                left, right, softcap, alibi, alibi_batch, dropout_p, seed, offset = mods or (-1, -1, 0.0, None, 0, 0.0, 0, 0)
                common = {"B": B, "T": T, "Tk": Tk, "NH": H, "NH_kv": H_kv, "HS": D, "causal": int(causal),
                          "fp16": int(dtype == torch.float16), "scale": 0.125, "window_left": left, "window_right": right,
                          "softcap": softcap, "dropout_p": round(dropout_p, 6), "stream": STREAM,
                          "alibi_slopes": 0 if alibi is None else alibi.data_ptr(), "alibi_batch": alibi_batch,
                          "dropout_seed": seed, "dropout_offset": offset,
                          "q_strides": layout_strides(q, layout), "k_strides": layout_strides(k, layout),
                          "v_strides": layout_strides(v, layout), "q": q.data_ptr(), "k": k.data_ptr(),
                          "v": v.data_ptr()}
                name = f"call {repeat + 1}"
                # the plan's forward (eager), then its backward with the gradients it allocates
                out, lse = fa._plain_forward(q, k, v, plan, mods)
                compare(f"forward {name}", dict(common, out=out.data_ptr(), lse=lse.data_ptr(), dout=0, dq=0, dk=0, dv=0,
                                                scratch=0, scratch_bytes=0, o_strides=layout_strides(out, layout),
                                                do_strides=[0] * 3,
                                                dq_strides=[0] * 3, dk_strides=[0] * 3, dv_strides=[0] * 3))
                dq, dk, dv = fa._plain_backward(dout, q, k, v, out, lse, plan, mods)
                backward = dict(common, out=out.data_ptr(), lse=lse.data_ptr(), dout=dout.data_ptr(), dq=dq.data_ptr(),
                                dk=dk.data_ptr(), dv=dv.data_ptr(), scratch_bytes=4096 if mods is None else 8192,
                                o_strides=layout_strides(out, layout), do_strides=layout_strides(dout, layout),
                                dq_strides=layout_strides(dq, layout), dk_strides=layout_strides(dk, layout),
                                dv_strides=layout_strides(dv, layout))
                compare(f"backward {name}", backward)
                if got()["scratch"] == 0:
                    problems.append(f"backward {name}: no scratch")
                # the compiled ops' bodies: out (B, T, H, D) memory, the gradients (B, T, H, D) (grads_bthd 7)
                fa._plain_plan = lambda *args: plan
                out_mem = torch.empty(B, T, H, D, dtype=dtype)
                lse_op = torch.empty(B, H, T)
                out_view = out_mem.transpose(1, 2) if layout == "bhtd" else out_mem
                seed_op = fa._op_forward(q, k, v, out_mem, lse_op, causal, 0.125, layout, left, right, softcap, alibi,
                                         dropout_p, seed if dropout_p else None)
                want_seed = seed if dropout_p else 0
                compare(f"op forward {name}", dict(common, out=out_mem.data_ptr(), lse=lse_op.data_ptr(),
                                                   o_strides=layout_strides(out_view, layout), dropout_seed=want_seed))
                grads = [torch.empty(B, n, h, D, dtype=dtype) for n, h in ((T, H), (Tk, H_kv), (Tk, H_kv))]
                fa._op_backward(dout, q, k, v, out_mem, lse_op, *grads, 7, causal, 0.125, layout, left, right, softcap,
                                alibi, dropout_p, seed_op)
                compare(f"op backward {name}", dict(common, out=out_mem.data_ptr(), lse=lse_op.data_ptr(),
                                                    dout=dout.data_ptr(), dq=grads[0].data_ptr(),
                                                    dk=grads[1].data_ptr(), dv=grads[2].data_ptr(),
                                                    o_strides=layout_strides(out_view, layout), dropout_seed=want_seed,
                                                    do_strides=layout_strides(dout, layout),
                                                    dq_strides=layout_strides(grads[0], "bthd"),
                                                    dk_strides=layout_strides(grads[1], "bthd"),
                                                    dv_strides=layout_strides(grads[2], "bthd")))
                fa._plain_plan = planned
            check(f"{tag}, {mods_name}: forward, backward, the ops' forward and backward, twice", not problems,
                  "; ".join(problems[:6]))


if __name__ == "__main__":
    sys.exit(main())
