"""flashgpt's attention for PyTorch: flashgpt.flash_attn_interface is FlashAttention 2.x's Python API over
libflashgpt_attention.so (python/flashgpt_attention.py is the library's own call). Put python/ on sys.path:

  import sys; sys.path.insert(0, "python")
  from flashgpt.flash_attn_interface import flash_attn_func
"""
