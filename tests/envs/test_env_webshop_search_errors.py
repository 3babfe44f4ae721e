"""gigpo/WebShop-v0's product search: a missing package names the extra to install, while a
damaged index directory or another backend failure is reported as itself."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

import gigpo_envs  # noqa: F401  (registers gigpo/WebShop-v0)
from gigpo_envs.webshop import generate_catalog
from gigpo_envs.webshop.search import ProductSearch
from retrieval_server.backends import BackendError, MissingDependencyError
from retrieval_server.backends.bm25s_backend import Bm25sBackend

ENV_ID = "gigpo/WebShop-v0"
EXTRA = 'pip install "gigpo[webshop]"'
NUM_PRODUCTS = 50


def _saved_index(directory):
    """Writes a good bm25s index of the generated 50-product catalog to ``directory``.

    Built with :class:`ProductSearch` itself, so the env's shop cache never sees it.
    """
    ProductSearch(generate_catalog(NUM_PRODUCTS, 0).products, index_dir=directory)
    assert (directory / "meta.json").is_file()
    return directory


def _make(index_dir, **kwargs):
    return gym.make(ENV_ID, num_products=NUM_PRODUCTS, index_dir=index_dir, **kwargs)


def _assert_not_an_install_hint(error: BaseException) -> None:
    assert not isinstance(error, ImportError), repr(error)
    assert "pip install" not in str(error)


def test_garbage_bm25s_files_in_the_index_directory_name_the_index(tmp_path):
    index_dir = _saved_index(tmp_path / "index")
    damaged = sorted(path for path in (index_dir / "bm25s").iterdir() if path.is_file())
    assert damaged
    for path in damaged:
        path.write_bytes(b"\x00 not an index \xff")
    with pytest.raises(BackendError, match="cannot load the bm25s index") as caught:
        _make(index_dir)
    _assert_not_an_install_hint(caught.value)
    assert str(index_dir) in str(caught.value)


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("meta.json", "garbage", "meta.json is not valid JSON"),
        ("docs.jsonl", "garbage\n", r"docs.jsonl:1 is damaged"),
    ],
)
def test_garbage_index_files_name_the_file(tmp_path, file, text, message):
    index_dir = _saved_index(tmp_path / "index")
    (index_dir / file).write_text(text)
    with pytest.raises(BackendError, match=message) as caught:
        _make(index_dir)
    _assert_not_an_install_hint(caught.value)


def test_a_build_failure_is_not_reported_as_a_missing_package(tmp_path, monkeypatch):
    # A stand-in for any index failure while building (disk full, a bug in a backend).
    def broken_build(cls, docs, **options):
        raise BackendError("the index could not be written: disk quota exceeded")

    monkeypatch.setattr(Bm25sBackend, "build", classmethod(broken_build))
    with pytest.raises(BackendError, match="disk quota exceeded") as caught:
        _make(tmp_path / "index")
    _assert_not_an_install_hint(caught.value)


def test_a_missing_dense_model_directory_is_reported_as_itself(tmp_path):
    pytest.importorskip("faiss")
    missing = tmp_path / "no-model"
    with pytest.raises(BackendError, match="model directory not found") as caught:
        _make(
            tmp_path / "index",
            search_backend="dense",
            backend_options={"model": str(missing)},
        )
    _assert_not_an_install_hint(caught.value)
    assert str(missing) in str(caught.value)


def test_a_missing_bm25s_package_names_the_extra_when_building(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # as if bm25s were not installed
    with pytest.raises(ImportError, match=r"gigpo\[webshop\]") as caught:
        _make(tmp_path / "index")
    assert "'bm25s' package" in str(caught.value)
    assert caught.value.name == "bm25s"
    assert isinstance(caught.value.__cause__, MissingDependencyError)
    assert not (tmp_path / "index" / "meta.json").exists()


def test_a_missing_bm25s_package_names_the_extra_when_loading(tmp_path, monkeypatch):
    index_dir = _saved_index(tmp_path / "index")
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"gigpo\[webshop\]") as caught:
        _make(index_dir)
    assert isinstance(caught.value.__cause__, MissingDependencyError)
    assert EXTRA in str(caught.value)
