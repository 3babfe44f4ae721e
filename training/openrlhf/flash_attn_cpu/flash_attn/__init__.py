"""Stand-in for flash-attn (CUDA kernels): the names OpenRLHF 0.11.2 imports, none usable."""
