"""flashgpt's attention for PyTorch: flashgpt.flash_attn_interface is FlashAttention 2.x's Python API over
libflashgpt_attention.so (python/flashgpt_attention.py is the library's own call). Install it (pip runs `make lib` and
puts the library in this package), or put python/ on sys.path after `make lib`:

  pip install ./python
  from flashgpt.flash_attn_interface import flash_attn_func
"""
