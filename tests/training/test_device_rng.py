"""Resume on every device: the RNG states of CUDA (one per visible device) and MPS are saved
in ``state.json`` and restored. This machine has neither: a minimal stand-in for the four
calls of ``torch.cuda``'s RNG API the checkpoint makes stands in for the GPU; the GPU check
(benchmarks/gpu_check.sh) confirms a resumed CUDA run equals a straight one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from training.local.checkpoint import load_checkpoint, read_state, write_checkpoint
from training.local.checkpoint_files import device_rng_states, restore_device_rngs, rng_from_json


class CudaRNGStandIn:
    """Stand-in for ``torch.cuda``'s RNG calls on a machine with ``count`` GPUs."""

    def __init__(self, count: int, initialized: bool = True) -> None:
        self.count, self.initialized = count, initialized
        self.states = [torch.arange(16, dtype=torch.uint8) * (d + 1) for d in range(count)]

    def is_available(self) -> bool:
        return self.count > 0

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        return self.count

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [s.clone() for s in self.states]

    def set_rng_state(self, state: torch.Tensor, device: int) -> None:
        self.states[device] = state.clone()


def _cpu_states() -> dict:
    import random

    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002
        "torch": torch.get_rng_state(),
        "generator": np.random.default_rng(0).bit_generator.state,
    }


def test_cuda_states_of_every_device_go_into_state_json_and_come_back(tmp_path):
    gpus = CudaRNGStandIn(2)
    rng = _cpu_states() | device_rng_states(cuda=gpus)
    assert len(rng["cuda"]) == 2
    write_checkpoint(tmp_path, {"model": {}, "optimizer": {}}, iteration=3, rng=rng)
    saved = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert saved["rng"]["cuda"] == [s.tolist() for s in gpus.states]
    back = rng_from_json(read_state(tmp_path / "checkpoint")["rng"])
    other = CudaRNGStandIn(2)
    other.states = [torch.zeros(16, dtype=torch.uint8)] * 2
    assert restore_device_rngs(back, cuda=other) == []
    assert [s.tolist() for s in other.states] == [s.tolist() for s in gpus.states]


def test_a_cpu_run_saves_no_device_state_and_an_old_checkpoint_still_reads(tmp_path):
    assert "cuda" not in device_rng_states(cuda=CudaRNGStandIn(1, initialized=False))
    assert device_rng_states(cuda=CudaRNGStandIn(0)) == {}
    write_checkpoint(tmp_path, {"model": {}, "optimizer": {}}, iteration=1, rng=_cpu_states())
    back = rng_from_json(read_state(tmp_path / "checkpoint")["rng"])
    assert set(back) == {"python", "numpy", "torch", "generator"}
    # resumed on a GPU that this run already uses: said, not silently different
    (problem,) = restore_device_rngs(back, cuda=CudaRNGStandIn(1))
    assert "no CUDA RNG state" in problem
    assert restore_device_rngs(back, cuda=CudaRNGStandIn(1, initialized=False)) == []


def test_another_device_count_restores_what_it_can_and_says_so():
    rng = {"cuda": CudaRNGStandIn(3).get_rng_state_all()}
    fewer = CudaRNGStandIn(2)
    fewer.states = [torch.zeros(16, dtype=torch.uint8)] * 2
    (problem,) = restore_device_rngs(rng, cuda=fewer)
    assert "3 device(s)" in problem and "has 2" in problem
    assert [s.tolist() for s in fewer.states] == [s.tolist() for s in rng["cuda"][:2]]


@pytest.mark.parametrize("bad", ["oops", [[1, 2, 300]], [["a"]], [[True]]])
def test_a_malformed_device_state_is_a_named_error_not_a_crash(tmp_path, tiny_model_dir, bad):
    from training.local.model import load_model, make_optimizer

    model = load_model(tiny_model_dir, "float32")
    optimizer = make_optimizer(model, 1e-3, 0.0)
    from training.local.checkpoint import save_checkpoint

    save_checkpoint(tmp_path, model=model, optimizer=optimizer, iteration=1,
                    generator=np.random.default_rng(0))  # fmt: skip
    path = tmp_path / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    state["rng"]["cuda"] = bad
    path.write_text(json.dumps(state))
    with pytest.raises(RuntimeError, match="device RNG state|cannot resume"):
        load_checkpoint(tmp_path, model=model, optimizer=optimizer,
                        generator=np.random.default_rng(0))  # fmt: skip
    state["rng"]["tpu"] = [1]
    del state["rng"]["cuda"]
    path.write_text(json.dumps(state))
    with pytest.raises(RuntimeError, match="optionally cuda and mps"):
        load_checkpoint(tmp_path, model=model, optimizer=optimizer,
                        generator=np.random.default_rng(0))  # fmt: skip
