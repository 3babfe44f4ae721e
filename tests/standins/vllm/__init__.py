"""Stand-in for vLLM (GPU only): the names OpenRLHF 0.11.2 imports, nothing that runs."""

__version__ = "0.0.0+gigpo-standin"


class SamplingParams:
    """Holds the sampling settings OpenRLHF passes to an engine (attributes only)."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self) -> str:
        return f"SamplingParams({self.__dict__})"


def _unavailable(*args, **kwargs):
    raise NotImplementedError("vllm stand-in: vLLM does not run on this machine")


class AsyncEngineArgs:
    def __init__(self, *args, **kwargs):
        _unavailable()


class AsyncLLMEngine:
    from_engine_args = staticmethod(_unavailable)
