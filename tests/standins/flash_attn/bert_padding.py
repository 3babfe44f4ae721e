"""Stand-in for ``flash_attn.bert_padding``: every function raises if called."""


def _unavailable(*args, **kwargs):
    raise NotImplementedError("flash_attn stand-in: flash-attn does not run on this machine")


index_first_axis = pad_input = rearrange = unpad_input = _unavailable
