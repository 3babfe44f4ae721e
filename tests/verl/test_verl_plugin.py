"""The plugin as verl loads it (its ``verl.plugins`` entry point, in a fresh process), its
CPU platform (``VERL_PLATFORM=cpu``), and its checks that fail loudly when verl changes under
it. The launcher's tests are in test_verl_launch.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from training.verl import command, plugin

PROBE = textwrap.dedent(
    """
    import json
    import verl  # nothing else: verl's own plugin discovery must do the rest
    from verl.trainer.ppo import core_algos, ray_trainer
    from verl.trainer.ppo.v1 import trainer_base, utils
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    print(json.dumps({
        "estimators": sorted(
            set(core_algos.ADV_ESTIMATOR_REGISTRY) & {"gigpo", "hgpo", "graphgpo"}),
        "patched": [getattr(f, "__gigpo_patched__", False) for f in (
            ray_trainer.compute_advantage, utils.compute_advantage, trainer_base.PPOTrainer)],
        "agent_loop": _agent_loop_registry.get("gigpo"),
    }))
    """
)


def _probe(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_plain_import_verl_registers_everything_in_a_fresh_process():
    seen = _probe()
    assert seen["estimators"] == ["gigpo", "graphgpo", "hgpo"]
    assert seen["patched"] == [True, True, True]
    assert seen["agent_loop"] == {"_target_": "training.verl.agent_loop.GiGPOAgentLoop"}


def test_without_verls_plugin_discovery_nothing_is_registered():
    seen = _probe(VERL_USE_EXTERNAL_PLUGINS="none")
    assert seen == {"estimators": [], "patched": [False, False, False], "agent_loop": None}


def test_a_verl_of_another_version_is_refused_by_name(caplog):
    with pytest.raises(plugin.VerlChangedError, match=r"verl==0\.9\.1.*verl 0\.10\.0"):
        plugin.check_verl_version("0.10.0")
    assert "verl 0.10.0" in caplog.text  # logged too: verl hides a plugin's import error
    assert plugin.check_verl_version() == "0.9.1"


def test_each_patch_checks_what_it_wraps():
    def changed(data, adv_estimator, gamma=1.0, config=None):  # a signature verl could move to
        return data

    with pytest.raises(plugin.VerlChangedError, match="compute_advantage"):
        plugin.wrap_compute_advantage(changed)
    with pytest.raises(plugin.VerlChangedError, match="register_adv_est"):
        plugin.register_estimators(types.SimpleNamespace(ADV_ESTIMATOR_REGISTRY={}))
    with pytest.raises(plugin.VerlChangedError, match="agent_loop.register"):
        plugin.register_agent_loop(types.SimpleNamespace())
    with pytest.raises(plugin.VerlChangedError, match="PPOTrainer._compute_advantage"):
        plugin.patch_trainer_base(types.SimpleNamespace(PPOTrainer=object))
    # the CPU platform's patches (training/verl/cpu.py): a moved or renamed target is named
    from training.verl import cpu

    name = "verl.utils.distributed"
    moved = types.ModuleType(name)
    moved.initialize_global_process_group_ray = lambda timeout=None: None
    with pytest.raises(plugin.VerlChangedError, match=r"initialize_global_process_group_ray\("):
        plugin.checked_patch(cpu.patch_process_group, cpu.TARGETS[name], moved)
    with pytest.raises(plugin.VerlChangedError, match="BucketedWeightReceiver.receive_weights"):
        plugin.checked_patch(cpu.patch_weight_receiver,
                             cpu.TARGETS[cpu.WEIGHT_TRANSFER], types.ModuleType("x"))  # fmt: skip


def test_the_launchers_list_of_verls_estimators_is_verls():
    from verl.trainer.ppo import core_algos

    verls = {e.value for e in core_algos.AdvantageEstimator}
    verls |= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert set(command.VERL_OWN_ESTIMATORS) == verls - {"gigpo", "hgpo", "graphgpo"}


#: The CPU platform as a fresh process sees it. Its vLLM patches (training/verl/vllm_cpu.py)
#: need vLLM's CPU build, which this env does not install: tests/verl_e2e runs them.
CPU_PROBE = textwrap.dedent(
    """
    import json
    import verl  # the plugin registers the CPU platform and its patches on this import
    from verl.plugin.platform import get_platform
    from verl.utils import distributed
    from verl.workers.engine.fsdp import transformer_impl
    platform = get_platform()
    module = platform.device_module
    state = module.get_rng_state()
    module.set_rng_state(state)
    print(json.dumps({
        "device": platform.device_name, "backend": platform.communication_backend_name(),
        "ray": platform.ray_resource_name(), "ipc": platform.is_ipc_supported(),
        "patched": [getattr(f, "__gigpo_patched__", False) for f in (
            distributed.initialize_global_process_group_ray, transformer_impl.CPUOffloadPolicy)],
        "memory": [module.memory_allocated(), module.max_memory_reserved()],
        "free": module.mem_get_info()[0] > 0,
    }))
    """
)


def test_verl_platform_cpu_selects_the_plugins_cpu_platform_in_a_fresh_process():
    done = subprocess.run([sys.executable, "-c", CPU_PROBE], capture_output=True, text=True,
                          env={**os.environ, "VERL_PLATFORM": "cpu"}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"device": "cpu", "backend": "gloo", "ray": "GPU", "ipc": False,
                    "patched": [True, True], "memory": [0, 0], "free": True}  # fmt: skip


def test_without_verl_platform_cpu_nothing_of_the_cpu_platform_is_installed():
    probe = (
        "import json, verl\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "from verl.utils import distributed\n"
        "print(json.dumps([PlatformRegistry.get('cpu') is None, getattr("
        "distributed.initialize_global_process_group_ray, '__gigpo_patched__', False)]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=300, check=True)  # fmt: skip
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, False]


def test_the_vllm_cpu_alias_answers_only_for_vllm(monkeypatch):
    """vLLM's CPU build is the distribution ``vllm-cpu``; verl asks for ``vllm``. The alias
    gives verl the CPU build's version with ``+cpu`` and stays out of every other lookup."""
    import importlib.metadata as metadata

    from training.verl import cpu, vllm_cpu

    real = metadata.distribution

    class CpuBuild(metadata.Distribution):
        def read_text(self, filename):
            if filename == "METADATA":
                return "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.27.0\nSummary: x\n"
            return None

        def locate_file(self, path):
            return path

    def distribution(name):
        if name == "vllm-cpu":
            return CpuBuild()
        if name == "vllm":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    finders = list(sys.meta_path)
    monkeypatch.setattr(sys, "meta_path", finders)
    assert cpu.alias_vllm_cpu() is True
    found = [f for f in finders if isinstance(f, vllm_cpu._VllmAliasFinder)]
    assert len(found) == 1
    context = metadata.DistributionFinder.Context(name="vllm")
    (alias,) = list(found[0].find_distributions(context))
    assert alias.metadata["Name"] == "vllm" and alias.version == "0.27.0+cpu"
    assert list(found[0].find_distributions(metadata.DistributionFinder.Context())) == []
    assert list(found[0].find_distributions(metadata.DistributionFinder.Context(name="x"))) == []
    assert (
        cpu.alias_vllm_cpu() is True
        and len([f for f in sys.meta_path if isinstance(f, vllm_cpu._VllmAliasFinder)]) == 1
    )  # installed once
