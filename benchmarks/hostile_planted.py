"""The third pass's probes (issue 60) for ``benchmarks/hostile_cli.py``: what is planted in a
run folder, a study folder or a model cache, as someone else's data, never code to run, a place
to write through or a file to wait on.

* **Code from a run folder**: a run whose ``config.json`` turns ``model.trust_remote_code`` on
  and whose ``tiny-model/`` maps its classes to a planted ``.py`` (it would write ``PWNED``).
* **Folders written into**: ``tensorboard/``, ``wandb/``, ``rollouts/``, ``checkpoint.tmp`` /
  ``checkpoint.old`` and a study's ``models/`` and ``runs/`` planted as links to a folder
  elsewhere, as FIFOs or as files.
* **The viewer's page** aimed inside a run (its checkpoint, metrics, config).
* **The model cache** (``HF_HUB_CACHE={d}/hub``, offline): a ref naming a path, FIFOs, a
  ``config.json`` 200,000 deep or 256 MiB, a safetensors header that lies.
* **Planted adapters** in a LoRA run: FIFO weights, a regex ``target_modules``, ``r`` of
  4,000,000; a tiny model without its tokenizer.
* **Settings**: LoRA targets that match nothing, ``lora_alpha`` 1e308, verl's ``algorithm=foo``
  and kin."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable

from hostile_plants import (
    ORIGINAL,
    Check,
    Ctx,
    Probe,
    absent,
    chain,
    fifo,
    remove,
    write,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "{d}/hub/models--org--m"
SNAPSHOT = f"{REPO}/snapshots/{COMMIT}"
HUB_ENV = {"HF_HUB_CACHE": "{d}/hub", "HF_HUB_OFFLINE": "1"}
PWNED = absent("{d}/PWNED", "ran the run folder's planted model code")


# ----------------------------------------------------------------------------- plants


def dirlink(rel: str) -> Callable[[Ctx], None]:
    """A symlink at ``rel`` to ``{d}/outside/``, a folder outside any run holding one file."""

    def setup(ctx: Ctx) -> None:
        outside = ctx.d / "outside"
        outside.mkdir(exist_ok=True)
        (outside / "outside.txt").write_text(ORIGINAL)
        path = ctx.path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        path.symlink_to(outside, target_is_directory=True)

    return setup


def outside_dir_kept(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
    outside = ctx.d / "outside"
    names = sorted(p.name for p in outside.iterdir()) if outside.is_dir() else []
    if names != ["outside.txt"] or (outside / "outside.txt").read_text() != ORIGINAL:
        return "unsafe_write", f"wrote or deleted through the planted link (outside/: {names[:4]})"
    return None


def same_as_fixture(rel: str) -> Check:
    """``{run}/rel`` still holds the fixture run's bytes."""

    def check(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
        mine, theirs = ctx.path("{run}/" + rel), ctx.fx / "run" / rel
        if not mine.is_file() or mine.read_bytes() != theirs.read_bytes():
            return "unsafe_write", f"replaced the run's {rel}"
        return None

    return check


def edit_json(rel: str, change: Callable[[dict], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = ctx.path(rel)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return setup


def remote_code(ctx: Ctx) -> None:
    """The run trusts remote code in its own config.json; its tiny model maps to pwn.py."""
    run = ctx.path("{run}")
    config = json.loads((run / "config.json").read_text())
    config["model"]["trust_remote_code"] = True
    (run / "config.json").write_text(json.dumps(config))
    model = json.loads((run / "tiny-model/config.json").read_text())
    model["auto_map"] = {"AutoConfig": "pwn.PwnConfig", "AutoModelForCausalLM": "pwn.PwnModel"}
    (run / "tiny-model/config.json").write_text(json.dumps(model))
    (run / "tiny-model/pwn.py").write_text(
        f"open({str(ctx.d / 'PWNED')!r}, 'w').write('pwned')\n"
        "from transformers import Qwen2Config as PwnConfig, Qwen2ForCausalLM as PwnModel\n"
    )


def hub_model(ctx: Ctx) -> None:
    """``org/m`` in a Hugging Face cache at ``{d}/hub``: the fixture run's tiny model."""
    snapshot = ctx.path(SNAPSHOT)
    shutil.copytree(ctx.fx / "run" / "tiny-model", snapshot)
    (ctx.path(REPO) / "refs").mkdir()
    (ctx.path(REPO) / "refs" / "main").write_text(COMMIT)


def ref_to_path(ctx: Ctx) -> None:
    """refs/main names ``../../outside/snap``: a model outside the cache."""
    hub_model(ctx)
    shutil.copytree(ctx.path(SNAPSHOT), ctx.path("{d}/hub/outside/snap"))
    (ctx.path(REPO) / "refs" / "main").write_text("../../outside/snap")


def sparse(rel: str, size: int) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = ctx.path(rel)
        path.unlink(missing_ok=True)
        with open(path, "wb") as handle:
            handle.write(b"{")
            handle.truncate(size)

    return setup


def lying_header(rel: str) -> Callable[[Ctx], None]:
    """A safetensors file whose 8-byte header length says 10 times its size."""

    def setup(ctx: Ctx) -> None:
        path = ctx.path(rel)
        data = bytearray(path.read_bytes())
        data[:8] = (len(data) * 10).to_bytes(8, "little")
        path.write_bytes(bytes(data))

    return setup


def adapter(change: Callable[[dict], None]) -> Callable[[Ctx], None]:
    return edit_json("{lora}/checkpoint/adapter/adapter_config.json", change)


# ----------------------------------------------------------------------------- probes


def probes() -> list[Probe]:
    """Every probe of this module, command by command."""
    resume = ["--config", "smoke", "--out", "{run}", "--run.iterations=3"]  # 2 done: one more
    dry = ["--config", "smoke", "--dry-run", "--model.tiny_warmup_steps=0"]
    lora = ["--model.lora_rank=4", "--model.trainable_layers=0"]
    hub = ["--config", "smoke", "--model.name_or_path=org/m"]
    deep = "[" * 200_000 + "]" * 200_000
    t, v, e, x = "gigpo-train", "gigpo-view", "gigpo-evaluate", "gigpo-export"
    out = [
        *[Probe(t, f"resume-{name}-dirlink", resume, dirlink("{run}/" + name), outside_dir_kept,
                timeout=120, env=dict(WANDB_MODE="offline"))
          for name in ("tensorboard", "rollouts", "checkpoint.tmp", "checkpoint.old")],
        Probe(t, "resume-wandb-dirlink", resume + ["--run.report_to=[wandb]"],
              dirlink("{run}/wandb"), outside_dir_kept, timeout=120,
              env=dict(WANDB_MODE="offline")),
        Probe(t, "resume-checkpoint-tmp-fifo", resume, fifo("{run}/checkpoint.tmp"), timeout=60),
        Probe(t, "resume-checkpoint-old-fifo", resume, fifo("{run}/checkpoint.old"), timeout=60),
        Probe(t, "resume-checkpoint-tmp-file", resume, write("{run}/checkpoint.tmp", "x"),
              timeout=60),
        Probe(t, "dry-run-lora-targets-match-nothing",
              dry + lora + ["--model.lora_target_modules=[nonexistent]"]),
        Probe(t, "dry-run-lora-alpha-1e308", dry + lora + ["--model.lora_alpha=1e308"]),
        Probe(t, "cache-ref-names-a-path", hub + ["--dry-run"], ref_to_path, env=HUB_ENV),
        Probe(t, "cache-ref-fifo", hub + ["--dry-run"],
              chain(hub_model, fifo(REPO + "/refs/main")), env=HUB_ENV),
        Probe(t, "cache-config-fifo", hub + ["--dry-run"],
              chain(hub_model, fifo(SNAPSHOT + "/config.json")), env=HUB_ENV),
        Probe(t, "cache-config-200000-deep", hub + ["--dry-run"],
              chain(hub_model, write(SNAPSHOT + "/config.json", deep)), env=HUB_ENV),
        Probe(t, "cache-config-256MiB", hub + ["--dry-run"],
              chain(hub_model, sparse(SNAPSHOT + "/config.json", 256 << 20)), env=HUB_ENV),
        Probe(t, "cache-weights-header-lies", hub + ["--out", "{d}/o"],
              chain(hub_model, lying_header(SNAPSHOT + "/model.safetensors")), env=HUB_ENV,
              timeout=120),
        *[Probe(v, f"out-inside-run-{name.replace('/', '-')}", ["{run}", "-o", "{run}/" + name],
                check=same_as_fixture(name))
          for name in ("checkpoint/state.json", "metrics.jsonl", "config.json",
                       "checkpoint/model.safetensors")],
        Probe(v, "out-through-a-link-into-a-run", ["{run}", "-o", "{d}/ck/state.json"],
              lambda ctx: ctx.path("{d}/ck").symlink_to(ctx.path("{run}/checkpoint")),
              same_as_fixture("checkpoint/state.json")),
        Probe(x, "run-config-trusts-planted-code", ["{run}", "{d}/x"], remote_code, PWNED,
              timeout=120),
        Probe(e, "run-config-trusts-planted-code", ["--model", "{run}", "--episodes", "1",
              "--out", "{d}/ev"], remote_code, PWNED, timeout=120),
        Probe(x, "tiny-model-without-tokenizer", ["{run}", "{d}/x"],
              remove("{run}/tiny-model/tokenizer.json"), timeout=120),
        Probe(x, "adapter-weights-fifo", ["{lora}", "{d}/x"],
              fifo("{lora}/checkpoint/adapter/adapter_model.safetensors"), timeout=120),
        Probe(x, "adapter-regex-targets", ["{lora}", "{d}/x"],
              adapter(lambda c: c.update(target_modules="(.*.*)*Z")), timeout=120),
        Probe(x, "adapter-rank-4000000", ["{lora}", "{d}/x"],
              adapter(lambda c: c.update(r=4_000_000)), timeout=120),
    ]  # fmt: skip
    study = ["--config", "smoke", "--seeds", "0", "--estimators", "grpo", "--jobs", "1",
             "--out", "{d}/st"]  # fmt: skip
    out += [Probe("training.study", f"planted-{name}-dirlink", study, dirlink("{d}/st/" + name),
                  outside_dir_kept, timeout=300) for name in ("models", "runs")]  # fmt: skip
    verl = {
        "algorithm-foo": ["algorithm=foo"], "kl-in-reward-yes": ["algorithm.use_kl_in_reward=yes"],
        "kl-in-reward-1": ["algorithm.use_kl_in_reward=1"],
        "gigpo-mapping": ["algorithm.gigpo={bogus: 1}"], "dataset-dir-empty": ["--dataset_dir", ""],
        "rollout-n-zero": ["actor_rollout_ref.rollout.n=0"],
        "group-size-contradicted": ["--group_size", "4", "actor_rollout_ref.rollout.n=5"],
    }  # fmt: skip
    out += [Probe("gigpo-verl", name, ["--dry-run", *args]) for name, args in verl.items()]
    return out
