"""BM25 at wiki scale: index and serve generated wiki-18-like corpora; JSON lines on stdout.

For each size (``--sizes``, default 100,000 and 1,000,000 passages; the corpus is written by
``synthetic_wiki.py``, whose docstring says how it is made and how it compares with real
wiki-18 passages), with the bm25s backend:

* ``build``: ``python -m retrieval_server index`` as a user runs it: wall seconds, peak
  resident memory of that process, and the index's size on disk (score matrix and
  vocabulary; the stored passages apart);
* ``serve``: ``python -m retrieval_server serve --index DIR --workers W`` (the score matrix
  and the passages' offsets memory-mapped, so the workers share one copy through the page
  cache): seconds until it answers, and after the queries,
  each worker's resident memory (RSS) and its proportional share (PSS, shared pages divided
  among the processes that map them);
* ``queries``: real questions (HotpotQA dev) over HTTP: one query per request from one
  client (queries/s, p50/p99 ms), ``--batch-size`` queries per request from one client, and
  one query per request from ``--clients`` concurrent clients;

then pyserini (Lucene BM25, the retriever Search-R1 uses) at ``--pyserini-at`` passages in
the same run, measured the same way. The last line projects each bm25s figure to wiki-18's
21,015,324 passages along the power law through the two largest sizes measured.

    python benchmarks/bench_wiki_scale.py [--sizes 100000,1000000] [--workers 2]
        [--work DIR (kept: corpora and indexes are reused)] [--pyserini-at 100000|0]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import DATA, REPO, emit, start_server  # noqa: E402
from synthetic_wiki import generate  # noqa: E402

WIKI18_PASSAGES = 21_015_324


def run_measured(command: list[str]) -> tuple[float, int]:
    """Runs ``command``; returns (wall seconds, peak RSS in bytes); raises on failure."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {stderr[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def disk_bytes(directory: Path, exclude: str = "docs.jsonl") -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name != exclude)


def descendants(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out += [int(child), *descendants(int(child))]
    return out


def worker_pids(server_pid: int, workers: int) -> list[int]:
    """The processes that serve: uvicorn's spawned workers, or the server itself."""
    if workers == 1:
        return [server_pid]
    found = [
        pid
        for pid in descendants(server_pid)
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    if len(found) != workers:
        raise RuntimeError(f"expected {workers} worker processes, found {len(found)}")
    return found


def memory_mib(pid: int) -> dict:
    """RSS and PSS of one process, MiB (Linux ``/proc/PID/smaps_rollup``)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) / 1024
    return {"rss_mib": round(fields["Rss"], 1), "pss_mib": round(fields["Pss"], 1)}


def time_queries(url: str, queries: list[str], batch_size: int, clients: int) -> dict:
    """Queries/s over HTTP (topk 3): single, batched, and single from concurrent clients."""
    from retrieval_server.client import RetrievalClient

    client = RetrievalClient(url)
    client.retrieve(queries[:16], topk=3)  # warm up
    latencies = []
    started = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        client.retrieve([query], topk=3)
        latencies.append(time.perf_counter() - t0)
    single = len(queries) / (time.perf_counter() - started)
    started = time.perf_counter()
    for i in range(0, len(queries), batch_size):
        client.retrieve(queries[i : i + batch_size], topk=3)
    batched = len(queries) / (time.perf_counter() - started)

    def worker(part: list[str]) -> None:
        own = RetrievalClient(url)
        for query in part:
            own.retrieve([query], topk=3)

    threads = [threading.Thread(target=worker, args=(queries[i::clients],)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    concurrent = len(queries) / (time.perf_counter() - started)
    ms = np.asarray(latencies) * 1000
    return {
        "single_qps": round(single, 1),
        "single_p50_ms": round(float(np.percentile(ms, 50)), 2),
        "single_p99_ms": round(float(np.percentile(ms, 99)), 2),
        "batched_qps": round(batched, 1),
        "batch_size": batch_size,
        "concurrent_qps": round(concurrent, 1),
        "clients": clients,
    }


def measure(backend: str, corpus: Path, index: Path, size: int, queries: list[str], args) -> dict:
    """Builds (unless the index exists) and serves one index; returns its record."""
    record: dict = {"backend": backend, "passages": size}
    if not (index / "meta.json").exists():
        command = [sys.executable, "-m", "retrieval_server", "index", "--corpus", str(corpus)]
        command += ["--out", str(index), "--backend", backend, "--quiet"]
        seconds, peak = run_measured(command)
        record.update(build_s=round(seconds, 1), build_peak_rss_mib=round(peak / 2**20, 1))
    record["index_mib"] = round(disk_bytes(index) / 2**20, 1)
    record["passages_mib"] = round((index / "docs.jsonl").stat().st_size / 2**20, 1)
    started = time.perf_counter()
    process, url = start_server(index, "--workers", str(args.workers))
    record["start_s"] = round(time.perf_counter() - started, 1)  # until it answers
    try:
        record.update(time_queries(url, queries, args.batch_size, args.clients))
        workers = [memory_mib(pid) for pid in worker_pids(process.pid, args.workers)]
        record["workers"] = args.workers
        record["worker_rss_mib"] = max(w["rss_mib"] for w in workers)
        record["worker_pss_mib"] = max(w["pss_mib"] for w in workers)
    finally:
        process.terminate()
        process.wait(30)
    return record


def project(records: list[dict]) -> dict:
    """Each figure at wiki-18's size, along the power law through the two largest sizes."""
    a, b = sorted(records, key=lambda r: r["passages"])[-2:]
    out: dict = {
        "projection": "wiki-18",
        "passages": WIKI18_PASSAGES,
        "from": [a["passages"], b["passages"]],
    }
    for key in ("build_s", "build_peak_rss_mib", "index_mib", "passages_mib", "start_s",
                "worker_rss_mib", "worker_pss_mib",
                "single_qps", "batched_qps", "concurrent_qps"):  # fmt: skip
        if key in a and key in b and a[key] > 0 and b[key] > 0:
            slope = math.log(b[key] / a[key]) / math.log(b["passages"] / a["passages"])
            value = b[key] * (WIKI18_PASSAGES / b["passages"]) ** slope
            out[key] = round(value, 1)
            out[f"{key}_exponent"] = round(slope, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--pyserini-at", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--work", default=None, help="folder for corpora and indexes (kept)")
    args = parser.parse_args()
    from gigpo_envs.searchqa.datasets import load_questions

    questions = load_questions(DATA / "hotpot_dev_simplified.json")
    queries = [q.question for q in questions[: args.queries]]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wiki_scale"))
    work.mkdir(parents=True, exist_ok=True)
    records = []
    for size in [int(s) for s in args.sizes.split(",")]:
        corpus = work / f"wiki_{size}.jsonl"
        if not corpus.exists():
            started = time.perf_counter()
            generate(size, corpus, seed=0)
            emit({"corpus": str(corpus), "passages": size,
                  "generate_s": round(time.perf_counter() - started, 1)})  # fmt: skip
        record = measure("bm25s", corpus, work / f"bm25s_{size}", size, queries, args)
        records.append(record)
        emit(record)
        if size == args.pyserini_at:
            emit(measure("pyserini", corpus, work / f"pyserini_{size}", size, queries, args))
    if len(records) >= 2:
        emit(project(records))


if __name__ == "__main__":
    main()
