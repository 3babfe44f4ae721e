"""training: GiGPO training on one machine (:mod:`training.local`) and on OpenRLHF across GPUs
(:mod:`training.openrlhf`). The only package where environments, algorithms and models meet.
"""
