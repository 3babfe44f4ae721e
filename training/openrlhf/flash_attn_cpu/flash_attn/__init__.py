"""flash-attn's padding helpers without its CUDA kernels (see ``flash_attn_cpu``)."""
