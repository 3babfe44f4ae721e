"""Hostile command lines against every installed command: tracebacks, hangs, unsafe writes.

Runs each probe of ``benchmarks/hostile_probes.py`` (unknown flags, missing values, wrong
types, huge and non-finite numbers, absurd counts, paths that do not exist, a folder or a FIFO
where a file is read, symlinks and FIFOs planted where a command writes, hostile YAML, output
folders inside a training run, ...) as ``python -m MODULE`` with this interpreter, each in a
process group of its own with ``PYTHONPATH=--root``, its working directory a fresh temporary
folder, stdin empty and a timeout, and classifies the outcome:

* ``clean``: refused (exit != 0) without a traceback, or exit 0 where that is the documented
  result (a probe marked so: a SIGINT handled, a symlinked output replaced by rename);
* ``traceback``: stderr holds ``Traceback (most recent call last)``;
* ``hang``: still running after the timeout (or holding over 4 GiB): its group is killed;
* ``unsafe_write``: wrote through a planted link, replaced a FIFO, or ran a YAML tag's code;
* ``silent_accept``: exit 0 for an input that should be refused (or a page past 16 MiB).

``usage_noise`` flags an error printed after a usage block of 3 or more lines. Fixtures (a
smoke training run, a one-task suite run, a bm25s index, hostile YAML and rollout files) are
made once per invocation with the ``--root`` checkout's own code (about a minute). Children
run with ``GIGPO_FREE_MEMORY_GIB=16`` (unless a probe sets it), ``HF_HUB_OFFLINE=1`` and
``OMP_NUM_THREADS=1`` (unless set), one at a time: about 17 minutes on 2 CPU cores where
15 probes hang (most of it their timeouts), 6 minutes where none does.

Prints one JSON line per probe, then one per command (probes and counts per outcome) and the
totals; ``--markdown FILE`` writes both tables (the non-clean probes with their last stderr
line). ``--only TEXT`` runs the probes whose ``command/name`` holds TEXT; ``--list`` names them.

    cd /tmp && OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/hostile_cli.py \\
        --root CHECKOUT --markdown table.md > probes.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_plants import MODULES, Ctx, Probe, write_fixtures  # noqa: E402
from hostile_probes import probes  # noqa: E402

OUTCOMES = ("clean", "traceback", "hang", "unsafe_write", "silent_accept")
TRACEBACK = "Traceback (most recent call last)"
MEMORY_CAP = 4 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")


def child_env(root: Path) -> dict[str, str]:
    # The memory plan is checked against 16 GiB, not what the machine has free right now
    # (another job's load would turn a probe into a "does not fit" refusal).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIGPO_")}
    env.update(
        PYTHONPATH=str(root), HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), RAY_USAGE_STATS_ENABLED="0",
        TOKENIZERS_PARALLELISM="false", GIGPO_FREE_MEMORY_GIB="16",
    )  # fmt: skip
    return env


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in the group ``pgid`` (from /proc)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 (pgrp); field 24 is rss, in pages
                total += int(fields[21]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def _kill(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def execute(probe: Probe, ctx: Ctx, env: dict[str, str], timeout: float, logs: Path) -> dict:
    """Runs one probe; returns its JSON record."""
    if probe.setup is not None:
        probe.setup(ctx)
    args = [ctx.fill(a) for a in probe.args]
    command = [sys.executable, "-m", MODULES[probe.command], *args]
    out_path, err_path = logs / "stdout", logs / "stderr"
    limit = probe.timeout or timeout
    start = time.monotonic()
    hang_note = None
    sent = None
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                command, cwd=ctx.d, env={**env, **{k: ctx.fill(v) for k, v in probe.env.items()}},
                stdout=out, stderr=err,
                stdin=subprocess.PIPE if probe.stdin_open else subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:  # e.g. an argument over 128 KiB: the probe is at fault
            return {"command": probe.command, "probe": probe.name, "outcome": "not_run",
                    "exit_code": None, "seconds": 0.0, "usage_noise": False, "usage_lines": 0,
                    "note": str(exc), "stderr_last": ""}  # fmt: skip
        polls = 0
        try:
            while proc.poll() is None:
                time.sleep(0.1)
                polls += 1
                elapsed = time.monotonic() - start
                if probe.sigint_on is not None and sent is None:
                    seen = out_path.read_bytes() + err_path.read_bytes()
                    if probe.sigint_on.encode() in seen:
                        sent = elapsed + 1.0  # a second into what it was doing
                if sent is not None and 0 <= sent <= elapsed:
                    _kill(proc.pid, signal.SIGINT)
                    sent = -1.0
                if elapsed > limit:
                    hang_note = f"still running after {limit:g} s"
                elif polls % 5 == 0 and group_rss(proc.pid) > MEMORY_CAP:
                    hang_note = f"held over {MEMORY_CAP >> 30} GiB after {elapsed:.0f} s"
                if hang_note:
                    _kill(proc.pid)
                    proc.wait()
                    break
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            _kill(proc.pid)  # a straggler it started (an env worker, a server) goes too
            proc.wait()
    seconds = time.monotonic() - start
    stderr = err_path.read_bytes().decode("utf-8", "replace")
    found = probe.check(ctx, proc.returncode) if probe.check is not None else None
    if hang_note:
        outcome, note = "hang", hang_note
    elif found is not None and found[0] == "unsafe_write":
        outcome, note = found
    elif TRACEBACK in stderr:
        outcome, note = "traceback", ""
    elif found is not None:
        outcome, note = found
    elif proc.returncode == 0 and not probe.ok0:
        outcome, note = "silent_accept", "exit 0"
    else:
        outcome, note = "clean", ""
    if probe.sigint_on is not None and sent is None and not hang_note:
        note = (note + "; " if note else "") + "ended before the SIGINT"
    usage = usage_lines(stderr)
    return {
        "command": probe.command, "probe": probe.name, "args": [_cut(a, 80) for a in probe.args],
        "outcome": outcome, "exit_code": None if hang_note else proc.returncode,
        "seconds": round(seconds, 2), "usage_noise": usage >= 3, "usage_lines": usage,
        "note": note, "stderr_last": _cut(last_line(stderr), 200),
    }  # fmt: skip


def usage_lines(stderr: str) -> int:
    """How many lines of the last ``usage:`` block come before an ``error:`` line (0: none)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("usage:")]
    if not starts:
        return 0
    for j in range(starts[-1], len(lines)):
        if "error:" in lines[j]:
            return j - starts[-1]
    return 0


def last_line(text: str) -> str:
    """The line that says what happened: a traceback's exception line, else the last line
    naming an error, else the last line (progress bars left out)."""

    def shown(part: str) -> list[str]:
        lines = [line.rstrip() for line in part.replace("\r", "\n").split("\n")]
        return [line for line in lines if line.strip() and "%|" not in line]

    if TRACEBACK in text:  # the last traceback's own lines (a progress bar may precede it)
        raised = [line for line in shown(text[text.rindex(TRACEBACK) :])[1:] if line[:1] != " "]
        if raised:
            return raised[-1]
    lines = shown(text)
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1].strip()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...[{len(text)} chars]"


def prepare(fx: Path, root: Path, env: dict[str, str]) -> None:
    """The fixtures every probe may copy, made with ``root``'s own code."""
    samples = root / "data" / "samples" / "searchqa"
    steps = [
        ("run", ["training.local", "--config", "smoke", "--out", str(fx / "run")]),
        ("lora", ["training.local", "--config", "smoke", "--model.lora_rank=4",
                  "--model.trainable_layers=0", "--run.iterations=1", "--out", str(fx / "lora")]),
        ("suite", ["training.cli.evaluate", "--suite", "searchqa-sample", "--model",
                   str(fx / "run"), "--max-episodes", "1", "--out", str(fx / "suite")]),
        ("index", ["retrieval_server", "index", "--corpus", str(samples / "wiki_sample_1000.jsonl"),
                   "--out", str(fx / "index"), "--quiet"]),
    ]  # fmt: skip
    fx.mkdir(parents=True, exist_ok=True)
    for name, module_args in steps:
        done = subprocess.run(
            [sys.executable, "-m", *module_args], cwd=fx, env=env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(f"fixture {name} failed ({done.returncode}): {done.stderr[-2000:]}")
    write_fixtures(fx, root, env)


def summarize(rows: list[dict]) -> list[dict]:
    by_command: dict[str, Counter] = {}
    for row in rows:
        counts = by_command.setdefault(row["command"], Counter())
        counts["probes"] += 1
        counts[row["outcome"]] += 1
        counts["usage_noise"] += row["usage_noise"]
    lines = []
    keys = ("probes", *OUTCOMES, "usage_noise")
    if any(row["outcome"] == "not_run" for row in rows):
        keys += ("not_run",)
    for command, counts in by_command.items():
        lines.append({"summary": command, **{k: counts[k] for k in keys}})
    lines.append({"summary": "total", **{k: sum(c[k] for c in by_command.values()) for k in keys}})
    return lines


def markdown(rows: list[dict], summary: list[dict], title: str) -> str:
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    keys = [key for key in summary[-1] if key != "summary"]
    out = [title, "", "| command | " + " | ".join(keys) + " |", "| --- |" + " ---: |" * len(keys)]
    for line in summary:
        out.append(f"| {cell(line['summary'])} | " + " | ".join(str(line[k]) for k in keys) + " |")
    out += ["", "| command | probe | outcome | exit | note | last stderr line |",
            "| --- | --- | --- | ---: | --- | --- |"]  # fmt: skip
    for row in rows:
        if row["outcome"] != "clean":
            out.append(
                f"| {cell(row['command'])} | {cell(row['probe'])} | {row['outcome']} | "
                f"{'-' if row['exit_code'] is None else row['exit_code']} | {cell(row['note'])} | "
                f"`{cell(row['stderr_last'])}` |"
            )
    return "\n".join(out) + "\n"


def main() -> int:
    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=here, help="the checkout to probe")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a hang")
    parser.add_argument("--only", help="run only probes whose command/name holds this text")
    parser.add_argument("--list", action="store_true", help="name the probes and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    selected = [p for p in probes() if not args.only or args.only in f"{p.command}/{p.name}"]
    if args.list:
        for p in selected:
            print(f"{p.command}/{p.name}: {' '.join(_cut(a, 60) for a in p.args)}")
        return 0
    root = args.root.resolve()
    env = child_env(root)
    where = subprocess.run(
        [sys.executable, "-c", "import training, retrieval_server, gigpo_envs; "
         "print(training.__file__, retrieval_server.__file__, gigpo_envs.__file__)"],
        cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not all(Path(f).resolve().is_relative_to(root) for f in where):
        raise SystemExit(f"PYTHONPATH={root} does not take precedence: {where}")
    work = Path(tempfile.mkdtemp(prefix="hostile-cli-"))
    tick = time.monotonic()
    try:
        prepare(work / "fx", root, env)
        setup = {"setup": str(root), "modules": where, "probes": len(selected)}
        print(json.dumps({**setup, "fixtures_s": round(time.monotonic() - tick, 1)}), flush=True)
        rows = []
        for i, probe in enumerate(selected):
            d, logs = work / f"p{i:03d}", work / f"log{i:03d}"
            d.mkdir()
            logs.mkdir()
            row = execute(probe, Ctx(d, work / "fx", root), env, args.timeout, logs)
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(d, ignore_errors=True)  # a planted tree is not kept past its probe
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rows)
    for line in summary:
        print(json.dumps(line))
    if args.markdown:
        title = f"Hostile command lines against `{root}` ({len(rows)} probes)"
        args.markdown.write_text(markdown(rows, summary, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
