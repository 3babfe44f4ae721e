"""``run.report_to``: every tracker gets metrics.jsonl's scalars at its steps, a resume
continues the same tracker run, a tracker that is not installed or not known is refused at
load, and a tracker that fails mid-run does not stop the run.

Offline only: Weights & Biases with ``WANDB_MODE=offline`` and ``WANDB_DIR`` in a temporary
folder, trackio with ``TRACKIO_DIR`` there (its local SQLite database).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from training.local.config import ConfigError, load_config
from training.local.metrics import read_metrics
from training.local.resume import config_changes
from training.local.trackers import STATE_FILE, TRACKERS, open_trackers, resolve

REPO = Path(__file__).resolve().parents[2]
ALL = "--run.report_to=[wandb,trackio,tensorboard]"
BASE = ["--model.name_or_path=tiny-random", "--env.id=gigpo/Sokoban-v0"]


def _load(*overrides: str):
    """A config through the loader and its checks (the env is not built: not needed here)."""
    return load_config(None, [*BASE, *overrides], check_files=False)


def _offline_env(tmp: Path) -> dict[str, str]:
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp / "wandb"),
        WANDB_PROJECT="gigpo",
        TRACKIO_DIR=str(tmp / "trackio"),
        TRACKIO_PROJECT="gigpo",
    )


def _train(tmp: Path, out: Path, model_dir: Path, *overrides: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "training.local", "--config", "smoke", "--out", str(out)]
        + ["--run.progress=false", "--run.threads=1", f"--model.name_or_path={model_dir}"]
        + [ALL, *overrides],
        capture_output=True,
        text=True,
        env=_offline_env(tmp),
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run.report_to:" not in result.stderr, result.stderr[-3000:]  # no tracker failed


def _expected(row: dict) -> dict[str, float]:
    """What every tracker must hold at step ``row["iteration"]``: each number but the step."""
    return {k: float(v) for k, v in row.items() if k != "iteration" and isinstance(v, int | float)}


def _wandb_records(path: Path):
    """wandb's own protobuf ``Record`` s of an offline run's ``.wandb`` file: a LevelDB-style
    log (a 7-byte header, then 32 KiB blocks of records, each with a checksum, a length and
    a type: full, first, middle, last), the format wandb's old ``datastore`` module read."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:7] == b":W&B\xe1\xbe\x00"
    position, parts = 7, b""
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        if left < 7:  # a block's tail too short for a record header is padding
            position += left
            continue
        length, kind = struct.unpack_from("<HB", data, position + 4)
        parts += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # full, last
            yield wandb_internal_pb2.Record.FromString(parts)
            parts = b""


def _items(items) -> dict:
    """A record's key-value items (a key is ``key`` or its ``nested_key`` parts)."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def _wandb_runs(folder: Path) -> list[dict]:
    """Each offline run in ``folder``: its id, name, config and history rows."""
    runs = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        run = {"id": None, "name": None, "config": {}, "history": []}
        for record in _wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run["id"], run["name"] = record.run.run_id, record.run.display_name
            elif kind == "config":
                run["config"].update(_items(record.config.update))
            elif kind == "history":
                items = _items(record.history.item)
                run["history"].append({k: v for k, v in items.items() if not k.startswith("_")})
        runs.append(run)
    return runs


READ_TRACKIO = """
import json, trackio
from trackio.sqlite_storage import SQLiteStorage
print(json.dumps([
    {"name": r.name, "id": r.id, "config": r.config,
     "logs": SQLiteStorage.get_logs("gigpo", r.name, run_id=r.id)}
    for r in trackio.Api().runs("gigpo")
]))
"""


def _trackio_runs(tmp: Path) -> list[dict]:
    """Each trackio run of project ``gigpo`` in ``tmp/trackio``, read through trackio's API
    (in a process of its own: trackio reads ``TRACKIO_DIR`` once, at import)."""
    result = subprocess.run([sys.executable, "-c", READ_TRACKIO], capture_output=True,
                            text=True, env=_offline_env(tmp), timeout=300, check=True)  # fmt: skip
    return json.loads(result.stdout.splitlines()[-1])


def _tensorboard_scalars(out: Path) -> dict[int, dict[str, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    steps: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            steps.setdefault(event.step, {})[tag] = event.value
    return steps


@pytest.mark.slow
def test_every_tracker_holds_the_metrics_and_a_resume_continues_its_run(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    _train(tmp_path, out, tiny_model_dir)  # iterations 0 and 1
    run_id = json.loads((out / STATE_FILE).read_text())["id"]
    _train(tmp_path, out, tiny_model_dir, "--run.iterations=3")  # resumes: iteration 2
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    expected = {r["iteration"]: _expected(r) for r in rows}
    assert json.loads((out / STATE_FILE).read_text())["id"] == run_id

    # Weights & Biases: one offline folder per process, both the same run (id), which a
    # sync joins; `iteration` is each row's step (every chart's x axis).
    first, resumed = _wandb_runs(tmp_path / "wandb")
    assert first["id"] == resumed["id"] == run_id
    assert first["name"] == resumed["name"] == out.name
    assert resumed["config"]["run"]["out"] == str(out)
    assert resumed["config"]["run"]["report_to"] == ["wandb", "trackio", "tensorboard"]
    assert resumed["config"]["algo"]["estimator"] == "gigpo"
    history = first["history"] + resumed["history"]
    assert [h.pop("iteration") for h in history] == [0, 1, 2]
    assert [{k: float(v) for k, v in h.items()} for h in history] == list(expected.values())

    # trackio: one run, continued by the resume, read back through trackio's API.
    (run,) = _trackio_runs(tmp_path)
    assert run["name"] == f"{out.name}-{run_id}"
    assert run["config"]["run"]["out"] == str(out)
    logs = {log.pop("step"): log for log in run["logs"]}
    assert list(logs) == [0, 1, 2]
    for step, log in logs.items():
        log.pop("timestamp")
        assert log == expected[step]

    # TensorBoard (float32 events): the same tags at the same steps.
    board = _tensorboard_scalars(out)
    assert sorted(board) == [0, 1, 2]
    for step, values in board.items():
        assert values == pytest.approx(expected[step], rel=1e-6, abs=1e-30)


def test_a_tracker_that_fails_mid_run_is_dropped_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    config = _load("--run.report_to=[tensorboard,wandb]", f"--out={tmp_path / 'run'}")
    (tmp_path / "run").mkdir()
    trackers = open_trackers(config, tmp_path / "run")
    assert trackers.names == ["tensorboard", "wandb"]
    trackers.write({"iteration": 0, "loss": 1.0})
    trackers.trackers[1].run.finish()  # wandb's run ends under the trainer: log now raises
    with pytest.warns(RuntimeWarning, match=r"wandb failed at iteration 1 \(UsageError.*goes on"):
        trackers.write({"iteration": 1, "loss": 0.5})
    assert trackers.names == ["tensorboard"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning, and the rest still writes
        trackers.write({"iteration": 2, "loss": 0.25})
        trackers.close()
    assert sorted(_tensorboard_scalars(tmp_path / "run")) == [0, 1, 2]


def test_a_tracker_that_fails_to_start_is_left_out_with_a_warning(tmp_path, monkeypatch):
    from training.local import trackers

    def refuse(*args):  # stand-in: wandb's service unreachable at start
        raise ConnectionError("no W&B server")

    monkeypatch.setitem(trackers.OPENERS, "wandb", refuse)
    config = _load("--run.report_to=[tensorboard,wandb]", f"--out={tmp_path}")
    with pytest.warns(RuntimeWarning, match="wandb failed to start .*no W&B server"):
        opened = open_trackers(config, tmp_path)
    assert opened.names == ["tensorboard"]
    opened.close()


@pytest.mark.parametrize("name", ["tensorboard", "wandb", "trackio"])
def test_a_tracker_that_is_not_installed_is_refused_at_load(name, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # named stand-in: `import name` fails
    with pytest.raises(ConfigError, match=rf"run\.report_to names {name}, which is not installed"
                       r".*pip install"):  # fmt: skip
        _load(f"--run.report_to=[{name}]")


def test_gigpo_train_exits_2_before_building_anything(tmp_path):
    out = tmp_path / "run"
    code = "import sys; sys.modules['wandb'] = None; from training.local.__main__ import main; "
    result = subprocess.run(
        [sys.executable, "-c", code + "sys.exit(main())", "--config", "smoke", "--out", str(out),
         "--run.report_to=[wandb,tensorboard]"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "run.report_to names wandb, which is not installed here: pip install" in result.stderr
    assert not out.exists()  # refused at load: no model built, nothing written


def test_all_means_each_installed_tracker_and_unset_means_tensorboard_if_installed(monkeypatch):
    assert resolve(_load("--run.report_to=all").run.report_to) == list(TRACKERS)
    assert resolve(_load().run.report_to) == ["tensorboard"]
    assert resolve(_load("--run.report_to=none").run.report_to) == []
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert resolve(_load("--run.report_to=all").run.report_to) == ["trackio"]
    assert resolve(_load().run.report_to) == []  # as run.tensorboard: null did, no error


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[mlflow]", "unknown tracker 'mlflow'; accepted: tensorboard, wandb, trackio, all, none"),
        ("[none,wandb]", "'none' stands alone"),
        ("[all,wandb]", "'all' stands alone"),
        ("[3]", r"\[0\] must be a string"),
    ],
)
def test_an_unknown_tracker_is_refused_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=rf"run\.report_to.*{message}"):
        _load(f"--run.report_to={value}")


@pytest.mark.parametrize(
    ("old", "new"), [("true", ["tensorboard"]), ("false", ["none"]), ("null", None)]
)
def test_run_tensorboard_is_read_as_report_to(old, new, tmp_path):
    with pytest.warns(FutureWarning, match="run.tensorboard is now run.report_to"):
        assert _load(f"--run.tensorboard={old}").run.report_to == new
    path = tmp_path / "config.yaml"
    path.write_text(f"run:\n  tensorboard: {old}\n")
    with pytest.warns(FutureWarning, match="run.tensorboard is now run.report_to"):
        assert load_config(path, BASE, check_files=False).run.report_to == new
    # An old run's config.json holds run.tensorboard: its resume sees no changed key.
    config = _load(f"--run.report_to={json.dumps(new)}")
    saved = config.to_dict()
    del saved["run"]["report_to"]
    saved["run"]["tensorboard"] = json.loads(old)
    assert config_changes(saved, config) == []


def test_run_tensorboard_and_report_to_together_are_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("run:\n  tensorboard: true\n  report_to: [wandb]\n")
    with pytest.raises(ConfigError, match="give run.report_to or its old name run.tensorboard"):
        load_config(path, BASE, check_files=False)
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match="true, false or null"):
        _load("--run.tensorboard=maybe")
