"""The names OpenRLHF 0.11.2 imports from flash-attn, for a CPU machine without it.

OpenRLHF's model module imports ``flash_attn.bert_padding`` (and ``flash_attn.utils``) at
module level, and flash-attn compiles CUDA kernels, so it does not install on a CPU machine.
On ``--gigpo.device cpu`` without flash-attn installed, this folder goes on ``sys.path``
(:func:`training.openrlhf.cpu.install_cpu_patches`): its ``flash_attn`` holds flash-attn's
padding helpers (gathers and scatters, written in torch) and no kernel; a kernel call raises.
The models run with ``sdpa`` attention; packed samples, which need the kernel, are refused.
"""
