"""Shared by the Python GPU tests (tests/test_python_attention.py, test_evoformer.py, test_flash_attn_interface.py): puts python/ on the path,
skips a test script (a SKIP line, exit 0) where torch or a CUDA GPU is missing, and runs each check as one PASS/FAIL
line, like tests/test_cpu."""
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def require_torch_cuda(script):
    try:
        import torch
    except ImportError:
        print(f"SKIP: {script} (no torch)")
        sys.exit(0)
    if not torch.cuda.is_available():
        print(f"SKIP: {script} (no CUDA GPU)")
        sys.exit(0)


results = []   # ("PASS" or "FAIL", name), in order


def run(name, fn, label=""):
    """fn() passes unless it raises (an AssertionError says what failed; anything else is a crash, its traceback
    printed); label prefixes the PASS/FAIL line"""
    try:
        fn()
        results.append(("PASS", name))
    except Exception as e:
        print(f"  {name}: {type(e).__name__}: {e}")
        if not isinstance(e, AssertionError):
            traceback.print_exc(file=sys.stdout)
        results.append(("FAIL", name))
    print(f"{results[-1][0]}: {label}{name}", flush=True)
