"""A model's files are checked before anything follows them or transformers reads them
(training/model_files.py, docs/security.md): a hub cache ref that names a path or is a FIFO,
a snapshot outside its repository's cache folder, a FIFO in a model folder, a config.json
nested too deeply or too large, a safetensors header that lies. Each is refused with one
line naming the file (exit 2 from a command), never followed, waited on or a traceback.

Every case plants the thing in a real cache laid out as huggingface_hub lays one out
(tests/hub_cache.py), a model directory or a run's ``tiny-model/``; no network."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hub_cache import cache_model  # noqa: E402

from training.cli.evaluate import main as evaluate_main  # noqa: E402
from training.hub import cached_model, config_file, resolve_model  # noqa: E402
from training.local.__main__ import main as train_main  # noqa: E402
from training.local.config import ConfigError, load_config  # noqa: E402
from training.model_files import (  # noqa: E402
    MAX_CONFIG_BYTES,
    ModelFileError,
    check_safetensors,
)

from .exit_codes import exit_code  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REPO_ID = "gigpo-tests/tiny-qwen2"
#: Nested this deep, json.loads recurses past Python's limit (a RecursionError).
DEEP = 200_000


@pytest.fixture
def hub(tiny_model_dir, tmp_path, monkeypatch) -> tuple[Path, str]:
    """An offline hub cache holding the tiny model as ``REPO_ID``: (its folder, the commit)."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache, cache_model(tiny_model_dir, cache, REPO_ID)


def _repo(cache: Path) -> Path:
    return cache / ("models--" + REPO_ID.replace("/", "--"))


def _snapshot(cache: Path, commit: str) -> Path:
    return _repo(cache) / "snapshots" / commit


def _replace(path: Path, content: bytes | None) -> None:
    """Puts ``content`` at ``path`` in place of what is there (a snapshot's link to its
    blob); None plants a FIFO."""
    path.unlink()
    if content is None:
        os.mkfifo(path)
    else:
        path.write_bytes(content)


def _args(out: Path, model: str = REPO_ID, *more: str) -> list[str]:
    """A one-iteration run of two episodes on NumberLine (fast on a CPU)."""
    return [
        f"--model.name_or_path={model}", "--env.id=gigpo/NumberLine-v0",
        "--env.kwargs={max_position: 3, max_steps: 2}", "--env.num_groups=1",
        "--env.group_size=2", "--eval.groups=1", "--eval.every=0",
        "--rollout.max_new_tokens=4", "--algo.minibatch_size=4", "--run.iterations=1",
        "--run.progress=false", "--run.threads=1", f"--out={out}", *more,
    ]  # fmt: skip


def _one_line(err: str, *named: str) -> None:
    """``err`` ends with one error line naming each of ``named``, and holds no traceback (a
    trainer says its compute setup on a line before)."""
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and err.strip().endswith(errors[0]) and "Traceback" not in err, err
    assert all(name in errors[0] for name in named), err


# ----------------------------------------------------------------------------- cache refs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", ["../../outside/snap", "../../nowhere", "/etc", "main", ""])
def test_a_ref_that_holds_no_commit_is_refused_naming_it(hub, tmp_path, text):
    """``refs/main`` naming a path made huggingface_hub load the model from outside the
    cache (and the run record ``snap`` as its commit), or raise a traceback of its own."""
    cache, commit = hub
    shutil.copytree(_snapshot(cache, commit), cache / "outside" / "snap")
    ref = _repo(cache) / "refs" / "main"
    ref.write_text(text)
    expected = re.escape(f"the cache ref {ref} does not hold a commit")
    for call in (resolve_model, config_file, cached_model):
        with pytest.raises(ModelFileError, match=expected):
            call(REPO_ID)
    for check_files in (True, False):  # a run, and a dry run
        with pytest.raises(ConfigError, match=expected):
            load_config("smoke", _args(tmp_path / "run"), check_files=check_files)


def test_a_ref_with_a_trailing_newline_is_read_as_its_commit(hub):
    cache, commit = hub
    (_repo(cache) / "refs" / "main").write_text(f"{commit}\r\n ")
    resolved = resolve_model(REPO_ID)
    assert resolved.path == _snapshot(cache, commit) and resolved.revision == commit
    assert config_file(REPO_ID) == _snapshot(cache, commit) / "config.json"
    assert cached_model(REPO_ID) == _snapshot(cache, commit)


@pytest.mark.timeout(60)
def test_a_ref_that_is_a_fifo_is_refused_never_waited_on(hub, tmp_path):
    cache, _ = hub
    ref = _repo(cache) / "refs" / "main"
    _replace(ref, None)
    expected = re.escape(f"the cache ref {ref} is a FIFO, not a regular file")
    for call in (resolve_model, config_file, cached_model):
        with pytest.raises(ModelFileError, match=expected):
            call(REPO_ID)
    with pytest.raises(ConfigError, match=expected):
        load_config("smoke", _args(tmp_path / "run"))


# ----------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_snapshot_that_lies_outside_its_repository_folder_is_refused(hub, tmp_path, what):
    """A snapshot folder linked elsewhere, or a file in it linked out of the cache: the
    model would load from a folder the cache does not hold."""
    cache, commit = hub
    snapshot = _snapshot(cache, commit)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(snapshot, elsewhere)
    if what == "folder":
        shutil.rmtree(snapshot)
        snapshot.symlink_to(elsewhere, target_is_directory=True)
        expected = f"the snapshot {snapshot} of {REPO_ID} is {elsewhere}"
    else:
        (snapshot / "config.json").unlink()
        (snapshot / "config.json").symlink_to(elsewhere / "config.json")
        expected = f"{snapshot / 'config.json'} links to {elsewhere / 'config.json'}"
    for call in (resolve_model, config_file, cached_model):
        with pytest.raises(ModelFileError, match=re.escape(expected)):
            call(REPO_ID)


# ----------------------------------------------------------------------------- FIFOs


@pytest.mark.timeout(120)
def test_a_fifo_config_in_the_cache_is_one_line_from_train_and_evaluate(hub, tmp_path, capsys):
    cache, commit = hub
    config = _snapshot(cache, commit) / "config.json"
    _replace(config, None)
    assert exit_code(train_main, _args(tmp_path / "run")) == 2
    _one_line(capsys.readouterr().err, f"{config} is a FIFO")
    out = tmp_path / "eval"
    argv = ["--model", REPO_ID, "--out", str(out), "--episodes", "1", "--config", "smoke"]
    assert exit_code(evaluate_main, argv) == 2
    _one_line(capsys.readouterr().err, "training.cli.evaluate: error:", f"{config} is a FIFO")


def _dry_run(tmp_path: Path, model: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``python -m training.local --dry-run`` on ``model``, offline on ``cache``: the real
    command in its own process, killed after 120 s (a hang fails, never blocks the tests)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": str(cache), "PYTHONPATH": str(REPO)}  # fmt: skip
    command = [sys.executable, "-m", "training.local", *_args(tmp_path / "run", model), "--dry-run"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "planted",
    ["refs/main FIFO", "config.json FIFO", "tokenizer_config.json FIFO", "weights header"],
)
def test_the_dry_run_refuses_a_planted_model_file_in_one_line(tmp_path, tiny_model_dir, planted):
    """Through the real command, which counts the first prompt with the model's tokenizer:
    a FIFO ref or config hung it; a FIFO tokenizer config was left out unsaid, and weights
    no run can load passed."""
    cache = tmp_path / "hf-cache"
    commit = cache_model(tiny_model_dir, cache, REPO_ID)
    model, folder = REPO_ID, _snapshot(cache, commit)
    if planted.startswith("tokenizer"):  # a local model directory this time
        model = folder = tmp_path / "model"
        shutil.copytree(tiny_model_dir, folder)
    name = planted.split()[0]
    path = _repo(cache) / name if name.startswith("refs") else folder / name
    if name == "weights":
        path = folder / "model.safetensors"
        data = path.read_bytes()
        _replace(path, struct.pack("<Q", 10 * len(data)) + data[8:])
    else:
        _replace(path, None)
    done = _dry_run(tmp_path, str(model), cache)
    assert done.returncode == 2, done.stderr
    kind = "not a valid safetensors file" if name == "weights" else "is a FIFO"
    _one_line(done.stderr, "python -m training.local: error: ", str(path), kind)


# ----------------------------------------------------------------------------- config.json


def _deep() -> bytes:
    return b"[" * DEEP + b"]" * DEEP


def _large(path: Path) -> None:
    """A 256 MiB config.json (sparse: it takes no disk), which nothing should read whole."""
    path.unlink()
    with open(path, "wb") as handle:
        handle.truncate(256 << 20)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("content", ["deep", "large"])
@pytest.mark.parametrize("where", ["hub", "directory"])
def test_a_config_too_deep_or_too_large_is_refused_at_load(
    hub, tmp_path, tiny_model_dir, where, content
):
    cache, commit = hub
    folder = _snapshot(cache, commit)
    if where == "directory":
        folder = tmp_path / "model"
        shutil.copytree(tiny_model_dir, folder)
    config = folder / "config.json"
    if content == "deep":
        _replace(config, _deep())
        expected = "nested too deeply"
    else:
        _large(config)
        expected = f"over the limit of {MAX_CONFIG_BYTES} bytes"
    model = REPO_ID if where == "hub" else str(folder)
    for check_files in (True, False):  # a run, and a dry run
        with pytest.raises(ConfigError, match=f"{re.escape(str(config))}: {expected}"):
            load_config("smoke", _args(tmp_path / "run", model), check_files=check_files)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("content", ["deep", "large"])
def test_a_run_tiny_model_whose_config_is_too_deep_or_large_is_one_line(
    tmp_path, tiny_model_dir, capsys, content
):
    """A run folder is not trusted: its ``tiny-model/`` (kept while its marker says it was
    built with the run's settings) is checked as any model folder is."""
    out = tmp_path / "run"
    shutil.copytree(tiny_model_dir, out / "tiny-model")
    config = out / "tiny-model" / "config.json"
    if content == "deep":
        _replace(config, _deep())
    else:
        _large(config)
    argv = _args(out, "tiny-random", "--model.tiny_warmup_steps=120")  # the fixture's build
    assert exit_code(train_main, argv) == 2
    _one_line(capsys.readouterr().err, str(config))


# ----------------------------------------------------------------------------- safetensors


def _header(path: Path) -> tuple[dict, bytes]:
    """(the header, the data after it) of a safetensors file."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _tensors(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _lying(path: Path, case: str) -> bytes:
    """The safetensors file ``path`` with its header made to lie in the way ``case`` says."""
    data = path.read_bytes()
    header, body = _header(path)
    first = next(k for k in header if k != "__metadata__")
    if case == "length past the end":
        return struct.pack("<Q", len(data)) + data[8:]
    if case == "length over 100 MB":
        return struct.pack("<Q", 2**63) + data[8:]
    if case == "shorter than 8 bytes":
        return data[:5]
    if case == "not JSON":
        length = struct.unpack("<Q", data[:8])[0]
        return data[:8] + b"{" * length + body
    if case == "not UTF-8":
        length = struct.unpack("<Q", data[:8])[0]
        return data[:8] + b"\xff" * length + body
    if case == "not an object":
        return _tensors([1, 2], body)  # type: ignore[arg-type]
    if case == "offsets past the data":
        header[first]["data_offsets"][1] += 4
    elif case == "shape not the offsets":
        header[first]["shape"][0] += 1
    elif case == "a gap":
        body = b"\0" * 4 + body
        for key, info in header.items():
            if key != "__metadata__":
                info["data_offsets"] = [n + 4 for n in info["data_offsets"]]
    elif case == "data left over":
        body += b"\0" * 4
    elif case == "two tensors in one place":
        second = [k for k in header if k not in ("__metadata__", first)][0]
        header[second]["data_offsets"] = list(header[first]["data_offsets"])
    elif case == "metadata not strings":
        header["__metadata__"] = {"format": 1}
    elif case == "no dtype":
        del header[first]["dtype"]
    elif case == "negative shape":
        header[first]["shape"] = [-1]
    return _tensors(header, body)


LIES = [
    "length past the end", "length over 100 MB", "shorter than 8 bytes", "not JSON",
    "not UTF-8", "not an object", "offsets past the data", "shape not the offsets", "a gap",
    "data left over", "two tensors in one place", "metadata not strings", "no dtype",
    "negative shape",
]  # fmt: skip


@pytest.mark.parametrize("case", LIES)
def test_a_safetensors_header_that_lies_is_refused_as_the_library_refuses_it(
    tmp_path, tiny_model_dir, case
):
    """Each lie is one the safetensors library refuses too (with a ``SafetensorError``
    traceback); the check names the file instead. The file as built passes both."""
    from safetensors import SafetensorError, safe_open

    weights = tiny_model_dir / "model.safetensors"
    check_safetensors(weights)
    with safe_open(str(weights), "pt"):
        pass
    path = tmp_path / "model.safetensors"
    path.write_bytes(_lying(weights, case))
    with pytest.raises(ModelFileError, match=re.escape(str(path))):
        check_safetensors(path)
    with pytest.raises(SafetensorError), safe_open(str(path), "pt"):
        pass


@pytest.mark.timeout(300)
def test_a_lying_weights_header_is_one_line_from_train_and_evaluate(
    tmp_path, tiny_model_dir, capsys
):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(_lying(weights, "not JSON"))
    assert exit_code(train_main, _args(tmp_path / "run", str(model))) == 2
    _one_line(capsys.readouterr().err, "error: the header of", str(weights), "not valid JSON")
    out = tmp_path / "eval"
    argv = ["--model", str(model), "--out", str(out), "--episodes", "1", "--config", "smoke"]
    assert exit_code(evaluate_main, argv) == 2
    _one_line(capsys.readouterr().err, "training.cli.evaluate: error:", str(weights))


def test_weights_the_library_refuses_at_load_name_their_folder(tmp_path, tiny_model_dir):
    """Past the check (a file changed after it read the header), the library's own error
    while the weights load names the folder too."""
    from training.local.model import load_critic, load_model

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(_lying(weights, "length past the end"))
    for load in (load_model, load_critic):
        with pytest.raises(
            ModelFileError, match=f"cannot load the weights in {re.escape(str(model))}"
        ):
            load(model, "float32")
