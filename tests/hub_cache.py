"""A Hugging Face hub cache built from a local model directory, laid out as huggingface_hub
writes one (``models--org--name/{blobs,refs,snapshots}``, snapshot files linked to their
content-addressed blobs), so that a model is loaded by hub id with ``HF_HUB_OFFLINE=1`` and
no network: what a user's cache holds after ``hf download``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_model(model_dir: Path, cache: Path, repo_id: str, commit: str | None = None) -> str:
    """Puts every file of ``model_dir`` into ``cache`` as ``repo_id`` at ``commit`` (default:
    a hash of the id), with ``refs/main`` pointing at it. Returns the commit."""
    commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(model_dir).iterdir()):
        if not path.is_file():
            continue
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.name
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return commit
