"""Speed of the retrieval backends and of the HTTP server: JSON lines on stdout.

The same queries (the first 1,000 HotpotQA dev questions) against the same corpus (the
1,000-passage wiki sample) through each backend:
  * ``build``: seconds to index the corpus;
  * ``search_single``: one query per call; queries/s, p50 and p99 latency in ms;
  * ``search_batched``: ``--batch-size`` queries per call; queries/s;
each beside pyserini (Lucene BM25, the usual retriever) measured in the same run.

Then a bounded load test of ``python -m retrieval_server serve`` (bm25s) on 127.0.0.1:
``--clients`` threads send requests of 1-4 queries with topk 1-5 for ``--duration``
seconds; every answer is checked against in-process retrieval (ids in order), and errors
and mismatches are counted. The baseline is the same server with batching off
(``--max-batch 1``), run for ``--baseline-duration`` seconds.

    python benchmarks/bench_retrieval.py [--backends bm25s,pyserini,dense] [--duration 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "samples" / "searchqa"


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def load_inputs(corpus: Path, questions: Path, count: int) -> tuple[list[dict], list[str]]:
    from gigpo_envs.searchqa.datasets import load_questions
    from retrieval_server.corpus import read_corpus

    docs = read_corpus(corpus)
    queries = [item.question for item in load_questions(questions)[:count]]
    return docs, queries


def bench_backend(name: str, docs: list[dict], queries: list[str], k: int, batch_size: int):
    """Builds one backend and times single and batched search; returns the records."""
    from retrieval_server.backends import get_backend

    options = {"index_type": "flat"} if name == "dense" else {}
    started = time.perf_counter()
    backend = get_backend(name).build(docs, **options)
    build_s = time.perf_counter() - started
    backend.search(queries[:8], k)  # warm up (JIT, caches, thread pools)
    latencies = []
    started = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        backend.search([query], k)
        latencies.append(time.perf_counter() - t0)
    single_s = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(queries), batch_size):
        backend.search(queries[start : start + batch_size], k)
    batched_s = time.perf_counter() - started
    lat_ms = np.asarray(latencies) * 1000
    return backend, {
        "build": {"seconds": build_s, "throughput": len(docs) / build_s, "unit": "docs/s"},
        "search_single": {
            "seconds": single_s,
            "throughput": len(queries) / single_s,
            "p50_ms": float(np.percentile(lat_ms, 50)),
            "p99_ms": float(np.percentile(lat_ms, 99)),
            "unit": "queries/s",
        },
        "search_batched": {
            "seconds": batched_s,
            "throughput": len(queries) / batched_s,
            "batch_size": batch_size,
            "unit": "queries/s",
        },
    }


def start_server(index: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "retrieval_server", "serve", "--index", str(index), "--port", "0"]
        + list(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("listening on "):
            url = line.split()[2]
            break
    else:
        raise RuntimeError("the server did not start")
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    from retrieval_server.client import RetrievalClient

    RetrievalClient(url).wait_until_ready(60)
    return process, url


def load_test(url: str, queries: list[str], expected: dict, clients: int, duration: float) -> dict:
    """``clients`` threads hammer ``url`` for ``duration`` seconds; returns the counts."""
    from retrieval_server.client import RetrievalClient

    client = RetrievalClient(url, timeout_s=30, retries=0)
    stop_at = time.monotonic() + duration
    lock = threading.Lock()
    totals = {"requests": 0, "queries": 0, "errors": 0, "mismatches": 0}
    latencies: list[float] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        counts = {"requests": 0, "queries": 0, "errors": 0, "mismatches": 0}
        mine = []
        while time.monotonic() < stop_at:
            picks = rng.integers(len(queries), size=int(rng.integers(1, 5)))
            k = int(rng.integers(1, 6))
            batch = [queries[i] for i in picks]
            t0 = time.perf_counter()
            try:
                rows = client.retrieve(batch, topk=k)
            except Exception:  # counted: the target is zero
                counts["errors"] += 1
                continue
            mine.append(time.perf_counter() - t0)
            counts["requests"] += 1
            counts["queries"] += len(batch)
            for i, row in zip(picks, rows, strict=True):
                if [doc["id"] for doc in row] != expected[int(i)][:k]:
                    counts["mismatches"] += 1
        with lock:
            for key, value in counts.items():
                totals[key] += value
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration + 60)
    seconds = time.perf_counter() - started
    lat_ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    return {
        **totals,
        "seconds": seconds,
        "throughput": totals["queries"] / seconds,
        "p50_ms": float(np.percentile(lat_ms, 50)),
        "p99_ms": float(np.percentile(lat_ms, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DATA / "wiki_sample_1000.jsonl")
    parser.add_argument("--questions", type=Path, default=DATA / "hotpot_dev_simplified.json")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--backends", default="pyserini,bm25s,dense")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--baseline-duration", type=float, default=10.0)
    args = parser.parse_args()
    for path in (args.corpus, args.questions):
        if not path.is_file():
            sys.exit(f"missing input {path}")
    docs, queries = load_inputs(args.corpus, args.questions, args.queries)
    names = [n for n in args.backends.split(",") if n]
    names.sort(key=lambda n: n != "pyserini")  # the baseline first
    results, backends = {}, {}
    for name in names:
        backends[name], results[name] = bench_backend(name, docs, queries, args.k, args.batch_size)
    for name in names:
        for what, record in results[name].items():
            base = results.get("pyserini", {}).get(what) if name != "pyserini" else None
            emit(
                {
                    "what": f"{what}:{name}",
                    "size": len(docs) if what == "build" else len(queries),
                    **record,
                    "baseline": "pyserini" if base else None,
                    "baseline_throughput": base["throughput"] if base else None,
                    "speedup": record["throughput"] / base["throughput"] if base else None,
                }
            )

    if args.duration <= 0 or args.clients < 1:
        return
    local = backends.get("bm25s")
    if local is None:
        from retrieval_server.backends import get_backend

        local = get_backend("bm25s").build(docs)
    expected = {i: [h.doc_id for h in row] for i, row in enumerate(local.search(queries, 5))}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        local.save(tmp)
        runs = [("load_test_batched", args.duration, ())]
        if args.baseline_duration > 0:
            runs.append(("load_test_unbatched", args.baseline_duration, ("--max-batch", "1")))
        measured = {}
        for what, duration, extra in runs:
            process, url = start_server(Path(tmp), *extra)
            try:
                measured[what] = load_test(url, queries, expected, args.clients, duration)
            finally:
                process.terminate()
                process.wait(30)
        base = measured.get("load_test_unbatched")
        for what, record in measured.items():
            emit(
                {
                    "what": f"{what}:bm25s",
                    "size": args.clients,
                    **record,
                    "unit": "queries/s",
                    "baseline": "load_test_unbatched"
                    if base and what != "load_test_unbatched"
                    else None,
                    "baseline_throughput": base["throughput"] if base else None,
                }
            )


if __name__ == "__main__":
    main()
