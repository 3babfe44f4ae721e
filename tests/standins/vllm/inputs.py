"""Stand-in for ``vllm.inputs``."""

TokensPrompt = dict
