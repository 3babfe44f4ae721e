"""What ``benchmarks/hostile_probes.py`` plants and checks: the probe record, the files planted
before a probe runs (FIFOs, symlinks, hostile contents), the checks after it, and the fixtures
made once per invocation of ``benchmarks/hostile_cli.py``.

Placeholders in arguments and paths: ``{d}`` the probe's own folder (its working directory),
``{fx}`` the fixtures, ``{root}`` the checkout, and ``{run}``, ``{suite}``, ``{index}``,
``{bomb}``, ``{lora}``: a fresh copy of the smoke training run, the one-task suite run, the bm25s
index, the run whose iteration 0 is a page bomb and a LoRA smoke run, made in ``{d}`` when
first named."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MODULES = {
    "gigpo-train": "training.local", "gigpo-quickstart": "training.cli.quickstart",
    "gigpo-view": "training.cli.view", "gigpo-evaluate": "training.cli.evaluate",
    "gigpo-export": "training.cli.export", "gigpo-openrlhf": "training.openrlhf.launch",
    "gigpo-verl": "training.verl.launch", "training.study": "training.study",
    "retrieval_server": "retrieval_server", "gigpo_envs": "gigpo_envs",
    "training.local.checkpoint": "training.local.checkpoint",
}  # fmt: skip
BIG = str(2**64)
DIGITS = "9" * 5000
ORIGINAL = "ORIGINAL\n"
PAGE_LIMIT = 16 << 20
#: Fixtures copied into a probe's folder when its arguments or plants name them.
COPIES = ("run", "suite", "index", "bomb", "lora")
Check = Callable[["Ctx", "int | None"], "tuple[str, str] | None"]


@dataclass
class Ctx:
    d: Path
    fx: Path
    root: Path

    def fill(self, text: str) -> str:
        for name in COPIES:
            if "{" + name + "}" in text and not (self.d / name).exists():
                shutil.copytree(self.fx / name, self.d / name, symlinks=True)
        for key, value in (("d", self.d), ("fx", self.fx), ("root", self.root)):
            text = text.replace("{" + key + "}", str(value))
        for name in COPIES:
            text = text.replace("{" + name + "}", str(self.d / name))
        return text

    def path(self, text: str) -> Path:
        return Path(self.fill(text))


@dataclass
class Probe:
    command: str
    name: str
    args: list[str]
    setup: Callable[[Ctx], None] | None = None
    check: Check | None = None
    ok0: bool = False  # exit 0 is the documented result
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    sigint_on: str | None = None  # SIGINT the group a second after this text is printed
    stdin_open: bool = False


# ----------------------------------------------------------------------------- plants


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _fresh(ctx: Ctx, rel: str) -> Path:
    path = ctx.path(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear(path)
    return path


def fifo(*rels: str) -> Callable[[Ctx], None]:
    return lambda ctx: [os.mkfifo(_fresh(ctx, rel)) for rel in rels] and None


def write(rel: str, data: str | bytes) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = _fresh(ctx, rel)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    return setup


def mkdir(rel: str) -> Callable[[Ctx], None]:
    return lambda ctx: _fresh(ctx, rel).mkdir()


def remove(rel: str) -> Callable[[Ctx], None]:
    return lambda ctx: _clear(ctx.path(rel))


def link(rel: str) -> Callable[[Ctx], None]:
    """A symlink at ``rel`` to ``{d}/outside.txt``, a file outside any run folder."""

    def setup(ctx: Ctx) -> None:
        (ctx.d / "outside.txt").write_text(ORIGINAL)
        _fresh(ctx, rel).symlink_to(ctx.d / "outside.txt")

    return setup


def dangling(rel: str) -> Callable[[Ctx], None]:
    """A symlink at ``rel`` to ``{d}/elsewhere``, which does not exist (yet)."""
    return lambda ctx: _fresh(ctx, rel).symlink_to(ctx.d / "elsewhere")


def rollout_line(line: str) -> Callable[[Ctx], None]:
    """The run's last rollout file: its own header, then ``line``."""

    def setup(ctx: Ctx) -> None:
        path = ctx.path("{run}/rollouts/iteration_000001.jsonl.gz")
        with gzip.open(path, "rt") as handle:
            header = handle.readline()
        with gzip.open(path, "wt") as handle:
            handle.write(header + line + "\n")

    return setup


def copy(source: str, rel: str) -> Callable[[Ctx], None]:
    return lambda ctx: shutil.copytree(ctx.path(source), _fresh(ctx, rel), symlinks=True) and None


def chain(*setups: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    return lambda ctx: [setup(ctx) for setup in setups] and None


def outside_kept(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
    target = ctx.d / "outside.txt"
    if not target.is_file() or target.read_text() != ORIGINAL:
        return "unsafe_write", "wrote through the planted link (outside.txt changed)"
    return None


def still_fifo(rel: str) -> Check:
    def check(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
        path = ctx.path(rel)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return "unsafe_write", f"removed the FIFO {path.name}"
        if not stat.S_ISFIFO(mode):
            return "unsafe_write", f"replaced the FIFO {path.name} with another file"
        return None

    return check


def absent(rel: str, what: str) -> Check:
    return lambda ctx, rc: ("unsafe_write", what) if os.path.lexists(ctx.path(rel)) else None


def page_bounded(rel: str) -> Check:
    def check(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
        path = ctx.path(rel)
        size = path.stat().st_size if path.is_file() else 0
        if size > PAGE_LIMIT:
            source = ctx.path("{bomb}/rollouts/iteration_000000.jsonl.gz").stat().st_size
            return "silent_accept", f"a {size / 2**20:.0f} MiB page from a {source >> 10} KiB file"
        return None

    return check


def restarted(ctx: Ctx, rc: int | None) -> tuple[str, str] | None:
    if rc == 0:
        return "silent_accept", "exit 0: the checkpoint without state.json was not refused"
    return None


# ----------------------------------------------------------------------------- fixtures


def write_fixtures(fx: Path, root: Path, env: dict[str, str]) -> None:
    """Hostile files shared by the probes (the runs are made by the caller)."""
    smoke = (root / "training/configs/smoke.yaml").read_text()
    deep = "[" * 5000 + "]" * 5000
    laughs = 'a0: &a0 ["lol", "lol"]\n' + "".join(
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 12)
    )
    files: dict[str, str | bytes] = {
        "dup_section.yaml": smoke + "run:\n  seed: 7\n",
        "dup_key.yaml": smoke.replace("  seed: 0\n", "  seed: 0\n  seed: 7\n"),
        "huge.yaml": "# " + "x" * (2 << 20) + "\n" + smoke,
        "deep.yaml": deep,
        "pytag.yaml": smoke + "extra: !!python/object/apply:os.system ['echo pwned > PWNED']\n",
        "alias.yaml": laughs,
        "nonutf8.yaml": b"run:\n  seed: \xff\xfe\n",
        "list.yaml": "- 1\n- 2\n",
        "tabs.yaml": "run:\n\tseed: 1\n",
        "study_dup.yaml": f"jobs: 1\njobs: 1\nparts:\n  - name: p\n    configs: "
        f"[{root / 'training/configs/smoke.yaml'}]\n    seeds: 1\n    arms: [grpo]\n",
        "corpus_nested.jsonl": '{"id": "1", "contents": ' + "[" * 100000 + "]" * 100000 + "}\n",
        "corpus_bigint.jsonl": '{"id": ' + DIGITS + ', "contents": "x"}\n',
        "corpus_nonutf8.jsonl": b'{"id": "1", "contents": "\xff\xfe"}\n',
        "corpus_notjson.jsonl": "id,contents\n1,x\n",
        "corpus_empty.jsonl": "",
        "corpus.jsonl": "".join(
            json.dumps({"id": str(i), "contents": f"t{i}\ndoc {i}"}) + "\n" for i in range(5)
        ),  # fmt: skip
        "deep.json": deep,
    }
    for name, data in files.items():
        (fx / name).write_bytes(data.encode() if isinstance(data, str) else data)
    # suites: the shipped sample suite with one hostile change each (the file keeps its name)
    suite = (root / "training/suites/searchqa-sample.yaml").read_text()
    nq = '"{samples}/searchqa/nq_test16.jsonl"'
    shutil.copyfile(root / "data/samples/searchqa/nq_test16.jsonl", fx / "nq_copy.jsonl")
    os.mkfifo(fx / "nq.fifo")
    up = "{samples}/" + "../" * 40
    variants = {
        "duplicate-key": suite.replace("version: 1\n", "version: 1\nversion: 1\n"),
        "kwargs-abspath": suite.replace(nq, f'"{fx / "nq_copy.jsonl"}"'),
        "kwargs-escape": suite.replace(nq, f'"{up}{str(fx / "nq_copy.jsonl").lstrip("/")}"'),
        "kwargs-fifo": suite.replace(nq, f'"{fx / "nq.fifo"}"'),
        "files-dotdot": suite.replace(" samples/searchqa/nq_test16", " samples/../../nq_test16"),
        "python-tag": suite + "extra: !!python/object/apply:os.system ['echo pwned > PWNED']\n",
    }
    for name, text in variants.items():
        (fx / "suites" / name).mkdir(parents=True)
        (fx / "suites" / name / "searchqa-sample.yaml").write_text(text)
    # old pickled checkpoints: a list, and a dict without the keys a checkpoint has
    for name, value in (("pickle_list", "[1, 2]"), ("pickle_keys", "{'iteration': 0}")):
        (fx / name / "checkpoint").mkdir(parents=True)
        code = f"import torch; torch.save({value}, {str(fx / name / 'checkpoint/state.pt')!r})"
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    shutil.copytree(fx / "run", fx / "bomb")
    _page_bomb(fx / "bomb")


def _page_bomb(run: Path, wide: int = 1200, deep: int = 1200) -> None:
    """``run``'s iteration 0 becomes one group: ``wide`` one-step trajectories and one of
    ``deep`` steps (the page's table is wide x deep cells; the gzip file is small)."""
    rows = [(t, 0) for t in range(wide)] + [(wide, s) for s in range(deep)]
    header = {"schema": "gigpo.rollouts", "version": 2, "iteration": 0, "source": "local",
              "records": len(rows), "estimator": "gigpo", "max_chars": 2000,
              "summary": {"records": len(rows), "step_group_coverage": 0.0,
                          "step_groups": len(rows),
                          "step_group_mean_size": 1.0, "step_group_sizes": {"1": len(rows)},
                          "sign_disagreement": 0.0, "both_nonzero": 0}}  # fmt: skip
    lines = [json.dumps(header)]
    for i, (traj, step) in enumerate(rows):
        lines.append(json.dumps({
            "iteration": 0, "group_id": 0, "traj_id": traj, "step": step, "observation": "o",
            "action": "a", "reward": 0.0, "is_action_valid": True, "anchor": f"s{i}",
            "anchor_text": None, "step_group_id": i, "episode_advantage": 0.0,
            "step_advantage": 0.0, "advantage": 0.0, "return": 0.0}))  # fmt: skip
    with gzip.open(run / "rollouts/iteration_000000.jsonl.gz", "wt", compresslevel=9) as handle:
        handle.write("\n".join(lines) + "\n")
