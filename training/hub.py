"""Models named as users name them: a local directory, or a Hugging Face hub id resolved the
way transformers resolves it (the hub cache, ``HF_HUB_OFFLINE``, a pinned revision).

:func:`resolve_model` gives the local folder a model loads from and the commit it came from,
which every run and summary records; :func:`config_file` gives a model's ``config.json``
alone (what a memory plan reads), without its weights. Offline and not cached is an error
naming the id and the one command that fetches it. A model whose config asks for its own
code (``auto_map``) is refused unless the user sets ``trust_remote_code`` (transformers'
default, kept). The cache is checked as it is read (:mod:`training.model_files`): a ref must
name a commit, the snapshot must lie in the repository's own cache folder, and a model
folder's files must be regular files, its JSON read within bounds and its safetensors
headers consistent with their files, before transformers opens any of them.

The packaged names (``smollm2``, ``tiny-random``) are the trainer's (:mod:`training.local.model`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from training.model_files import (
    ModelFileError,
    ModelNotFoundError,
    check_model_folder,
    check_snapshot,
    is_regular_file,
    read_model_config,
    ref_commit,
)
from training.text import show

__all__ = [
    "WEIGHT_PATTERNS", "ModelFileError", "ModelNotFoundError", "RemoteCodeError", "ResolvedModel",
    "cached_model", "check_remote_code", "commit_of", "config_file", "fetch_command",
    "hub_cache", "is_hub_id", "is_offline", "resolve_model",
]  # fmt: skip

#: The files of a model repository a run loads (weights, config, tokenizer, generation
#: config): the other formats a repository may carry (ONNX, GGUF, ``.bin`` beside
#: safetensors, code) are not downloaded.
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]


class RemoteCodeError(ValueError):
    """A model whose config needs its own Python code, without ``trust_remote_code``."""


@dataclass(frozen=True)
class ResolvedModel:
    """Where a named model loads from.

    Attributes:
        name: as the user gave it (a path or a hub id).
        path: the local folder holding its ``config.json`` (a hub snapshot for an id).
        revision: the commit the snapshot is (40 hex digits); None for a local directory.
    """

    name: str
    path: Path
    revision: str | None = None


def is_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) forbids the
    network, read now (not at import, so a process may set it after importing us)."""
    truthy = ("1", "on", "yes", "true")
    return any(os.environ.get(k, "").strip().lower() in truthy
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))  # fmt: skip


def hub_cache() -> Path:
    """The hub cache folder, as huggingface_hub finds it: ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (read now)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return Path(home).expanduser() / "hub"


def is_hub_id(name: str) -> bool:
    """Whether ``name`` can be a hub repository id (``org/model`` or ``model``): what is not a
    path (no leading ``/``, ``.``, ``~``, at most one ``/``) and passes huggingface_hub's own
    check."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or name.startswith(("/", ".", "~")) or name.count("/") > 1:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def fetch_command(name: str, revision: str | None) -> str:
    """The one command that puts ``name`` (at ``revision``) into the hub cache."""
    pin = f" --revision {revision}" if revision else ""
    return f"hf download {name}{pin}"


def _not_found(key: str, name: str, revision: str | None, why: str) -> ModelNotFoundError:
    at = f" at revision {show(revision)}" if revision else ""
    path = f" (nor is there a local directory {name})" if "/" in name else ""
    return ModelNotFoundError(
        f"{key}={show(name)}{at}: {why}{path}; fetch it with `{fetch_command(name, revision)}` "
        f"(into {hub_cache()}), or give a local model directory"
    )


def _refusal(exc: BaseException) -> str | None:
    """Why the hub refused a repository (gated, absent or private, no such revision), in
    words; None for any other error (the network, the disk)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):  # a RepositoryNotFoundError too: asked first
        return "a gated repository: accept its terms on the hub and log in (`hf auth login`)"
    if isinstance(exc, RepositoryNotFoundError):
        return "no such repository on the hub (or it is private: log in with `hf auth login`)"
    if isinstance(exc, RevisionNotFoundError):
        return "the hub has no such revision"
    return None


def _local_dir(name: str, key: str) -> Path | None:
    """``name`` as a local model directory, None when no such path exists.

    Raises:
        ModelNotFoundError: the path exists but holds no ``config.json``, or it is not a
            path and not a hub id either (a :class:`ModelFileError`: its ``config.json`` is
            no regular file).
    """
    path = Path(name).expanduser()
    if path.exists():
        if not is_regular_file(path / "config.json"):
            raise ModelNotFoundError(
                f"{key}={show(name)} is a local path but not a model directory (no "
                "config.json in it); give a Hugging Face model directory or a hub id"
            )
        return path
    if not is_hub_id(name):
        raise ModelNotFoundError(
            f"{key}={show(name)}: no such local directory, and not a Hugging Face hub id (org/name)"
        )
    return None


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))


def _cached_revision(name: str, revision: str | None, local: bool) -> str | None:
    """The revision to ask huggingface_hub for: when the files come from the cache alone
    (``local``), the commit that the cache's ref of ``revision`` names, read and checked here
    (huggingface_hub would follow a path written there, or wait on a FIFO); else
    ``revision`` as given, its ref checked all the same (read when the hub is out of reach).

    Raises:
        ModelFileError: the ref is no regular file or holds no commit (naming it).
    """
    commit = ref_commit(hub_cache(), name, revision)
    return commit if local and commit else revision


def resolve_model(
    name: str,
    revision: str | None = None,
    *,
    key: str = "model.name_or_path",
    trust_remote_code: bool = False,
) -> ResolvedModel:
    """The local folder of model ``name``: a directory as it is, a hub id through the hub
    cache (downloading the files :data:`WEIGHT_PATTERNS` names when the network is allowed).

    Args:
        revision: a branch, tag or commit of a hub id (None: ``main``); not read for a
            directory.
        key: the setting that named the model, for messages.
        trust_remote_code: also fetch the repository's Python files (its own model code).

    Raises:
        ModelNotFoundError: no such directory, an id not in the cache while offline (or
            cached without its weights), a repository or revision the hub does not have.
        ModelFileError: a cache ref that holds no commit, a snapshot outside the
            repository's cache folder, or a file of the model folder refused
            (:func:`training.model_files.check_model_folder`).
    """
    local = _local_dir(name, key)
    if local is not None:
        check_model_folder(local)
        return ResolvedModel(name, local)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = is_offline()
    patterns = WEIGHT_PATTERNS + (["*.py"] if trust_remote_code else [])
    asked = _cached_revision(name, revision, offline)

    def fetch(allowed: list[str]) -> Path:
        return Path(snapshot_download(name, revision=asked, cache_dir=hub_cache(),
                                      local_files_only=offline, allow_patterns=allowed,
                                      ignore_patterns=["consolidated*"]))  # fmt: skip

    try:
        folder = fetch(patterns)
        if not offline and not _has_weights(folder):  # an older repository: .bin weights
            folder = fetch(["pytorch_model*.bin", "pytorch_model*.json"])
    except LocalEntryNotFoundError:
        why = ("not in the Hugging Face cache, and HF_HUB_OFFLINE forbids downloading it"
               if offline else "not in the cache, and the hub could not be reached")  # fmt: skip
        raise _not_found(key, name, revision, why) from None
    except (HfHubHTTPError, OSError) as exc:
        why = _refusal(exc) or f"download failed ({exc})"
        raise _not_found(key, name, revision, why) from None
    check_snapshot(folder, hub_cache(), name)
    check_model_folder(folder)
    if not (folder / "config.json").is_file() or not _has_weights(folder):
        raise _not_found(key, name, revision, f"the cached snapshot {folder} has no "
                         "config.json or no weights (only part of it was fetched)")  # fmt: skip
    return ResolvedModel(name, folder, folder.name)


def cached_model(name: str, revision: str | None = None) -> Path | None:
    """The hub cache's snapshot of hub id ``name`` (at ``revision``) when it holds the model's
    config and tokenizer, without any download; None otherwise.

    Raises:
        ModelFileError: as :func:`resolve_model` (a ref, a snapshot or a file refused).
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if not is_hub_id(name):
        return None
    asked = _cached_revision(name, revision, True)
    try:
        folder = Path(snapshot_download(name, revision=asked, cache_dir=hub_cache(),
                                        local_files_only=True))  # fmt: skip
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError):
        return None
    check_snapshot(folder, hub_cache(), name)
    check_model_folder(folder)
    found = (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()
    return folder if found else None


def config_file(
    name: str, revision: str | None = None, *, key: str = "model.name_or_path"
) -> Path | None:
    """The ``config.json`` of model ``name`` alone (a few KB; the weights are not fetched):
    a directory's, the hub cache's, or the hub's when the network is allowed. None when it
    cannot be had here (offline and not cached, the hub unreachable, a gated repository).

    Raises:
        ModelNotFoundError: a path that is no model directory, a name that is neither a
            path nor a hub id, or a repository or revision the hub says it does not have.
        ModelFileError: a cache ref that holds no commit, or a snapshot outside the
            repository's cache folder.
    """
    local = _local_dir(name, key)
    if local is not None:
        return local / "config.json"
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = is_offline()
    asked = _cached_revision(name, revision, offline)
    try:
        found = Path(
            hf_hub_download(
                name, "config.json", revision=asked, cache_dir=hub_cache(), local_files_only=offline
            )
        )
    except GatedRepoError:
        return None  # its config is gated too; the download says what to do
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise _not_found(key, name, revision, _refusal(exc)) from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError):
        return None
    check_snapshot(found.parent, hub_cache(), name)
    return found


def commit_of(
    name: str, revision: str | None = None, *, key: str = "model.name_or_path"
) -> str | None:
    """The commit hub id ``name`` (at ``revision``) resolves to now, read off its
    ``config.json``'s snapshot (no weights fetched); None for a local directory. A run, a
    suite or a study pins it so that everything it plays uses the same weights.

    Raises:
        ModelNotFoundError: as :func:`resolve_model`, when not even the config can be had.
    """
    if _local_dir(name, key) is not None:
        return None
    found = config_file(name, revision, key=key)
    if found is None:  # out of reach: the error names the id and the command that fetches it
        found = resolve_model(name, revision, key=key).path / "config.json"
    return found.parent.name


def check_remote_code(config_path: Path, trusted: bool, *, key: str) -> None:
    """Refuses a model whose ``config.json`` maps its classes to its own code (``auto_map``)
    unless ``trusted``: running a repository's Python is what ``trust_remote_code`` allows,
    off by default as in transformers.

    Raises:
        RemoteCodeError: naming ``key`` (the setting that allows it).
        ModelFileError: the config is no regular file, not a JSON object, over
            :data:`~training.model_files.MAX_CONFIG_BYTES` or nested too deeply.
    """
    data = read_model_config(config_path)  # read trusted or not: a FIFO is refused here
    if trusted:
        return
    if data.get("auto_map"):
        raise RemoteCodeError(
            f"the model in {config_path.parent} runs its own Python code (config.json's "
            f"auto_map: {show(data['auto_map'])}); set {key}: true only if you trust that "
            "repository"
        )
