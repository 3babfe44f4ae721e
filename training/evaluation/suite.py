"""A pinned suite, played and tabled (``gigpo-evaluate --suite NAME --model M``, whose command
line is :mod:`training.cli.evaluate`).

The suite (:mod:`training.evaluation.suite_file`) fixes what is played; this module checks the
request against it, prepares and hashes the data (:mod:`training.evaluation.data`), loads
the model, plays the tasks resumably (:mod:`training.evaluation.play`) and writes, into
``out``:

* ``run.json``: the settings a resumed run must repeat;
* ``data_manifest.json``: the SHA-256 of every data file read, and their digest;
* ``episodes.jsonl``: one row per episode (task, column, outcome, steps), batch by batch;
* ``summary.json`` and ``table.md``: the paper-layout cells (:mod:`training.evaluation.table`).

:func:`evaluate_suite` returns the table (the command prints it on stdout).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.evaluation.data import check_manifest, prepare_data
from training.evaluation.heldout import (
    DEFAULT_BATCH_SIZE,
    EvalSettings,
    compute_setup,
    eval_config,
    eval_engine,
    evaluated,
    load_policy,
    prompt_config,
)
from training.evaluation.play import code_version, play_suite, suite_tasks
from training.evaluation.suite_file import PINNED_KEYS, SuiteError, load_suite, set_roots
from training.evaluation.table import markdown_table, summarize
from training.files import atomic_write_text, check_writable_target
from training.guarded import GuardError, read_json_file
from training.local.checks import LIMITS
from training.local.config import ConfigError
from training.locks import FolderLock, hold_folder
from training.text import show

#: ``run.json`` keys that a resumed run must repeat.
RUN_KEYS = ("suite", "suite_version", "data_sha256", "model", "model_revision", "prompt",
            "temperature", "top_p", "group_size", "batch_size", "max_new_tokens", "run_seed",
            "overrides", "retriever_url")  # fmt: skip


@dataclass
class SuiteRequest:
    """What ``gigpo-evaluate --suite`` was asked for, option by option (the command's
    names; None: the suite's or the command's default).

    ``suite`` is a shipped suite name or a suite YAML file, ``model`` as ``--model``,
    ``config`` a YAML config or shipped name, ``overrides`` the ``--section.key=value``
    texts (none may touch what the suite pins), ``out`` the run folder; ``episodes`` must
    stay None (a suite fixes its tasks; ``max_episodes`` plays each part's first N).
    """

    suite: str
    model: str
    out: Path
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    episodes: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    prompt: str = "template"
    max_new_tokens: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    group_size: int = 1
    max_episodes: int | None = None
    data_dir: str | None = None
    retriever_url: str | None = None
    data_manifest: str | None = None


def default_suite_out(
    suite: str, model: str, prompt: str, temperature: float | None, group_size: int
) -> Path:
    """A suite run's folder when ``--out`` is not given, one per run's settings:
    ``runs/suites/SUITE/MODEL-PROMPT-DECODING[-gN]`` (``greedy`` or ``t0.7``; a group of
    several rollouts samples at temperature 1 unless told)."""
    import re

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model).name or model)
    if temperature is None and group_size > 1:
        temperature = 1.0
    decoding = f"t{temperature:g}" if temperature else "greedy"
    group = f"-g{group_size}" if group_size > 1 else ""
    return Path("runs/suites") / Path(suite).stem / f"{name}-{prompt}-{decoding}{group}"


def suite_config(args: SuiteRequest) -> tuple[Any, Any, dict[str, Any], Any]:
    """``(suite, config, run settings, data)`` for a request: the request is checked
    against the suite first, then the data is prepared (generated once if the suite has a
    recipe) and hashed, then the config (which builds one env) is loaded; no model yet.

    Raises:
        ConfigError (SuiteError): an unknown suite, an override of a key the suite pins
            (named), ``--episodes`` with a suite, or a group without sampling.
    """
    overrides = args.overrides
    suite = load_suite(args.suite)
    for text in overrides:
        key = text.lstrip("-").split("=", 1)[0]
        if key in PINNED_KEYS or key.split(".")[0] in ("env", "rollout"):
            raise SuiteError(f"--{key}: suite {suite.name} pins the env and rollout settings; "
                             "write a suite file for other settings")  # fmt: skip
    if args.episodes is not None:
        raise SuiteError("--episodes does not apply to a suite; --max-episodes N plays its first N")
    most = LIMITS["env.group_size"]  # the trainer's bound: each episode of a group holds an env
    if not 1 <= args.group_size <= most:
        raise SuiteError(
            f"--group-size must be in 1..{most} (the trainer's env.group_size bound; the paper's "
            f"groups are 8, and a group plays its episodes at once, an env each), "
            f"got {show(args.group_size)}"
        )
    if args.max_episodes is not None and args.max_episodes < 1:
        raise SuiteError(f"--max-episodes must be >= 1, got {args.max_episodes}")
    temperature = args.temperature
    if temperature is None:
        temperature = suite.sampling["temperature"] if args.group_size == 1 else 1.0
    if args.group_size > 1 and temperature == 0:
        raise SuiteError("--group-size > 1 needs sampling: --temperature > 0 (default 1.0)")
    top_p = suite.sampling["top_p"] if args.top_p is None else args.top_p
    settings = EvalSettings(
        episodes=1, temperature=temperature, top_p=top_p, prompt=args.prompt,
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
    )  # fmt: skip
    settings.check()  # before any data is prepared or model loaded
    set_roots(suite, args.data_dir, args.retriever_url)
    data = prepare_data(suite)
    if args.data_manifest:
        check_manifest(data["files"], args.data_manifest)
    config = eval_config(args.model, args.config, [*overrides, *suite.overrides()])
    config = prompt_config(config, settings)
    config.model.revision = _hub_commit(args.model, config.model.revision)
    run = {
        "suite": suite.name, "suite_version": suite.version, "model": args.model,
        "model_revision": config.model.revision,
        "prompt": args.prompt, "temperature": temperature,
        "top_p": top_p if temperature > 0 else 1.0, "group_size": args.group_size,
        "batch_size": args.batch_size, "max_new_tokens": config.rollout.max_new_tokens,
        "suite_max_new_tokens": suite.rollout.get("max_new_tokens"),
        "run_seed": config.run.seed, "data_sha256": data["sha256"], "overrides": overrides,
        "retriever_url": args.retriever_url,
    }  # fmt: skip
    return suite, config, run, data


def _hub_commit(model: str, revision: str | None) -> str | None:
    """The commit hub id ``model`` resolves to now (:func:`training.hub.commit_of`), pinned
    for the whole suite run and recorded, so that a resumed run plays the same weights;
    ``revision`` as it is for anything else (a run directory, a local or packaged model).

    Raises:
        SuiteError: the id cannot be resolved here (the message names the fetch).
    """
    from training.hub import ModelNotFoundError, commit_of
    from training.local.trained import find_run_dir
    from training.packaged import PACKAGED_MODELS

    if model in PACKAGED_MODELS or find_run_dir(model):
        return revision
    try:
        return commit_of(model, revision, key="--model") or revision
    except ModelNotFoundError as exc:
        raise SuiteError(str(exc)) from None


def evaluate_suite(args: SuiteRequest) -> str:
    """Plays and tables a suite (see the module docstring); returns the table (markdown).

    Raises:
        ConfigError (SuiteError for the suite's own checks): the request does not fit the
            suite, its data or ``out`` (holding another run of the suite), or the model
            cannot be loaded; the message names the option or file.
        FolderLockError: ``out`` is in use by another process (named), or holds another
            kind of output (:func:`training.locks.hold_folder`).
    """
    out = Path(args.out)
    commit = code_version()  # of the code this process loaded, before anything runs
    with _as_suite_errors():
        suite, config, run, data = suite_config(args)
        tasks = suite_tasks(suite)
        selected = list(range(len(tasks)))
        if args.max_episodes:
            selected = first_of_each_part(tasks, args.max_episodes)
        out.mkdir(parents=True, exist_ok=True)
    with _lock(out):  # the summary and the table too are written while the folder is held
        with _as_suite_errors():
            for name in ("run.json", "data_manifest.json", "episodes.jsonl", "summary.json",
                         "table.md"):  # fmt: skip
                check_writable_target(out / name)  # a planted link or FIFO: refused first
            _check_run(out, run)
            atomic_write_text(out / "data_manifest.json", json.dumps(data, indent=1) + "\n")
        try:
            trained = load_policy(args.model, config, out)
        except (FileNotFoundError, RuntimeError, ValueError) as exc:
            raise SuiteError(str(exc)) from exc
        policy, tokenizer = trained.policy, trained.tokenizer
        bar = _progress(suite.name, len(selected))
        try:
            with compute_setup(config, policy):
                rows = play_suite(
                    policy, tokenizer, config, suite, tasks, selected, out,
                    temperature=run["temperature"], top_p=run["top_p"],
                    group_size=run["group_size"], batch_size=run["batch_size"],
                    progress=bar.update, commit=commit,
                    engine=eval_engine(config, policy, trained.source.path),
                )  # fmt: skip
        finally:
            bar.close()
        summary = {
            **run,
            "layout": suite.layout,
            "description": suite.description,
            "data": {
                "sha256": data["sha256"],
                "pinned": data["pinned"],
                "files": len(data["files"]),
            },
            # The code of each invocation that played rows (a resumed run may span several).
            "commit": ", ".join(sorted({str(row.get("commit")) for row in rows})) or commit,
            **evaluated(trained),
            "env_id": suite.env["id"],
            "env_kwargs": {p.name: suite.part_kwargs(p) for p in suite.parts},
            "data_sizes": {p.name: p.size for p in suite.parts},
            "complete": len(selected) == len(tasks),
            "tasks_total": len(tasks),
            **summarize(suite.layout, [p.name for p in suite.parts], rows),
        }
        table = markdown_table([summary])
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
        atomic_write_text(out / "table.md", table)
    return table


@contextlib.contextmanager
def _as_suite_errors() -> Iterator[None]:
    """A ValueError or OSError inside becomes a :class:`SuiteError` with its message (the
    command's exit 2); a ConfigError (SuiteError included) passes as it is."""
    try:
        yield
    except ConfigError:
        raise
    except (ValueError, OSError) as exc:
        raise SuiteError(str(exc)) from exc


def first_of_each_part(tasks: list[dict[str, Any]], n: int) -> list[int]:
    """The positions of the first ``n`` tasks of each part, in order (``--max-episodes``)."""
    taken: dict[str, int] = {}
    kept = []
    for i, task in enumerate(tasks):
        taken[task["part"]] = taken.get(task["part"], 0) + 1
        if taken[task["part"]] <= n:
            kept.append(i)
    return kept


def _lock(out: Path) -> FolderLock:
    """Holds ``out`` for this process until the lock is released
    (:func:`training.locks.hold_folder`, kind ``suite``).

    Raises:
        FolderLockError: ``out`` is in use by another process (FolderBusyError: its pid,
            command and start named; wait for it or use another --out), or holds another
            kind of output, a plain evaluation or a training run (FolderKindError).
    """
    return hold_folder(out, "suite", "gigpo-evaluate --suite")


class _progress:
    """A tqdm bar on a terminal; elsewhere (a log file, CI) one plain line per batch."""

    def __init__(self, name: str, total: int) -> None:
        from tqdm import tqdm

        self.name, self.total, self.done = name, total, 0
        self.tick = time.perf_counter()
        self.bar = tqdm(total=total, desc=name, unit="task", file=sys.stderr) if (
            sys.stderr.isatty()) else None  # fmt: skip

    def update(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        else:
            print(
                f"{self.name}: {self.done}/{self.total} tasks, "
                f"{time.perf_counter() - self.tick:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _check_run(out: Path, run: dict[str, Any]) -> None:
    """Writes ``run.json``, or checks that a folder's earlier run had the same settings."""
    path = out / "run.json"
    if path.is_file():
        try:  # the guarded reader: size, depth, digits, no NaN; a JSON object
            earlier = read_json_file(path, "--out's run file", max_bytes=1 << 20)
        except GuardError as exc:
            raise SuiteError(f"{exc}; use another --out") from None
        differ = [k for k in RUN_KEYS if earlier.get(k) != run.get(k)]
        if differ:
            raise SuiteError(
                f"--out {out} holds a run with other settings ({', '.join(differ)}: "
                + ", ".join(f"{show(earlier.get(k))} there, {show(run.get(k))} now" for k in differ)
                + "); use another --out, or delete it to start over"
            )
        return
    if (out / "episodes.jsonl").exists():
        raise SuiteError(f"--out {out} holds episodes of another command; use another --out")
    atomic_write_text(path, json.dumps(run, indent=1) + "\n")
