"""The viewer against files it did not write: tampered headers, records of the wrong types,
group ids that need encoding, unreadable inputs, and what ``--serve`` answers.

No browser runs in the test environment, so the page is checked as HTML: what a parser makes
of it (tags, attributes, text) is what a browser would build its DOM from.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigpo_algo.advantages import gigpo_advantages
from training.cli.view import main
from training.record_files import (
    SCHEMA,
    SCHEMA_VERSION,
    RolloutFileError,
    read_rollouts,
    rollout_path,
    rollout_rows,
    rows_summary,
    write_rollouts,
)
from training.viewer.assets import SCRIPT
from training.viewer.page import build_page

# three trajectories in two groups; trajectories 0 and 1 both start from state s0
TRAJ = [0, 0, 1, 1, 2]
GROUP = [0, 0, 0, 0, 1]
ANCHORS = ["s0", "s1", "s0", "s2", "s0"]


def _rows(
    group_ids: list[Any] | None = None,
    traj: list[int] = TRAJ,
    group: list[int] = GROUP,
    anchors: list[str] = ANCHORS,
) -> list[dict[str, Any]]:
    """Real records (GiGPO's own advantages) of ``traj`` / ``group`` / ``anchors``, the groups
    named by ``group_ids`` (one id per row; default the group indices)."""
    n = len(traj)
    rewards = np.linspace(0.0, 1.0, n)
    result = gigpo_advantages(rewards, np.array(traj), np.array(group), anchors)
    return rollout_rows(
        0,
        group_ids=group if group_ids is None else group_ids,
        traj_ids=traj,
        rewards=rewards,
        is_action_valid=[True] * n,
        anchors=anchors,
        anchor_texts=[f"state {a}" for a in anchors],
        observations=[f"observation {i}" for i in range(n)],
        actions=[f"action {i}" for i in range(n)],
        step_group_ids=result.step_group_ids,
        episode_advantages=result.episode_advantages,
        step_advantages=result.step_advantages,
        advantages=result.advantages,
        returns=result.returns,
    )


def _rewrite(path: Path, header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Writes ``path`` as a hand edit would: the header and records given, line for line."""
    lines = [json.dumps(header)] + [json.dumps(row) for row in rows]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def _run(tmp_path: Path, rows: list[dict[str, Any]] | None = None, **header: Any) -> Path:
    """A run directory holding one rollout file of ``rows`` (default :func:`_rows`), its
    header as :func:`write_rollouts` writes it but for the keys in ``header``."""
    run = tmp_path / "run"
    rows = _rows() if rows is None else rows
    path = rollout_path(run, 0)
    path.parent.mkdir(parents=True)
    written = {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "iteration": 0, "source": "local",
        "records": len(rows), "estimator": "gigpo", "max_chars": 2000,
        "summary": rows_summary(rows),
    }  # fmt: skip
    _rewrite(path, {**written, **header}, rows)
    return run


def _fails(run: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    """Runs the command on ``run``; checks that it exits 2 with one error line holding every
    piece of ``expected`` and writes no page (beside the run: none is allowed inside it).
    Returns the message."""
    page = run.parent / f"{run.name}.html"
    assert main([str(run), "-o", str(page)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m training.cli.view: error: ") and err.count("\n") == 1, err
    for piece in expected:
        assert piece in err, (piece, err)
    assert not page.exists()
    return err


class _Page(HTMLParser):
    """What a parser builds of the page: every start tag with its attributes, the text, and
    per group row its ``data-group`` and link."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.rows: list[dict[str, str | None]] = []
        self.templates: list[str | None] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr" and "pick" in (a.get("class") or "").split():
            self.rows.append({"group": a["data-group"], "href": None})
        elif tag == "a" and self.rows and self.rows[-1]["href"] is None:
            self.rows[-1]["href"] = a["href"]
        elif tag == "template":
            self.templates.append(a["data-group"])

    def handle_data(self, data: str) -> None:
        self.text.append(data)


# ----------------------------------------------------------------------------- the header
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("records", "<script>alert(1)</script>"),
        ("step_groups", "<img src=x onerror=alert(2)>"),
        ("both_nonzero", "<iframe src=javascript:alert(3)>"),
        ("records", True),
        ("step_groups", -1),
        ("step_group_coverage", "1"),
        ("sign_disagreement", float("nan")),
        ("step_group_coverage", 7.5),
        ("step_group_sizes", {"2": "<b>many</b>"}),
    ],
)
def test_a_tampered_header_summary_is_a_named_error_not_markup(tmp_path, capsys, key, value):
    rows = _rows()
    run = tmp_path / "run"
    path = write_rollouts(run, 0, rows, estimator="gigpo")
    header, _ = read_rollouts(path)
    header["summary"][key] = value
    _rewrite(path, header, rows)
    _fails(run, capsys, path.name, "line 1 (header)", f"summary.{key} must be")


@pytest.mark.parametrize("key", ["estimator", "source"])
def test_header_texts_must_be_strings(tmp_path, capsys, key):
    run = _run(tmp_path, **{key: ["<script>alert(1)</script>"]})
    _fails(run, capsys, "line 1 (header)", f"{key} must be a string")


# ----------------------------------------------------------------------------- records
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("anchor_text", 5),
        ("anchor_text", ["state"]),
        ("group_id", [0]),
        ("group_id", {"id": 0}),
        ("group_id", True),
        ("group_id", 1.5),
        ("group_id", "\ud800"),
        ("traj_id", [1]),
        ("traj_id", None),
        ("reward", float("inf")),
        ("step_advantage", float("nan")),
        ("advantage", 10**400),
        ("episode_advantage", -(10**400)),
    ],
)
def test_a_record_the_page_cannot_show_is_a_named_error(tmp_path, capsys, key, value):
    rows = _rows()
    rows[1] = {**rows[1], key: value}  # the second record: line 3
    run = tmp_path / "run"
    path = write_rollouts(run, 0, _rows(), estimator="gigpo")
    header, _ = read_rollouts(path)
    _rewrite(path, header, rows)
    big = isinstance(value, int) and abs(value) > 10**100  # refused as parsed (guarded)
    expected = "line 3: an integer of 401 digits" if big else f"line 3: {key} must be"
    with pytest.raises(RolloutFileError, match=expected):
        build_page(run)
    _fails(run, capsys, path.name, expected)


def test_group_ids_that_read_alike_are_an_error(tmp_path, capsys):
    # int 1 and string "1" would both be group "1" in the page, one hiding the other
    rows = _rows([0, 0, 1, 1, "1"], group=[0, 0, 1, 1, 2])
    _fails(_run(tmp_path, rows), capsys, "line 6: group_id '1' reads as group_id 1 of line 4")


def test_the_command_exits_2_without_a_traceback(tmp_path):
    rows = _rows()
    rows[0] = {**rows[0], "group_id": ["a", "list"]}
    run = tmp_path / "run"
    path = write_rollouts(run, 0, _rows())
    _rewrite(path, read_rollouts(path)[0], rows)
    done = subprocess.run(
        [sys.executable, "-m", "training.cli.view", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr == (
        f"python -m training.cli.view: error: {path} line 2: group_id must be an int or a string "
        "of valid Unicode, at most 200 chars, got ['a', 'list']\n"
    )


# ----------------------------------------------------------------------------- the page
IDS = [
    "%41", "A", "/", "#", "?", "a b", "é", "日本", "&<>\"'", "", "100%", "%E0", "%2F",
    "g=1&h=2", "a\r\nb", "x\x00y", "+",
]  # fmt: skip


def test_any_string_group_id_round_trips_through_its_address(tmp_path):
    # each id a group of two one-step trajectories from the same state
    n = len(IDS)
    rows = _rows(
        [IDS[i // 2] for i in range(2 * n)],
        traj=list(range(2 * n)),
        group=[i // 2 for i in range(2 * n)],
        anchors=["s"] * (2 * n),
    )
    page, info = build_page(_run(tmp_path, rows))
    assert info["records"] == 2 * n
    parsed = _Page(page)
    assert [row["group"] for row in parsed.rows] == IDS
    assert parsed.templates == IDS
    for row in parsed.rows:
        href = row["href"]
        # only characters a browser keeps as they are in an address, so that the script's
        # decodeURIComponent of location.hash gives back exactly the encoded id
        assert re.fullmatch(r"#group=[A-Za-z0-9_.~%-]*", href), href
        assert urllib.parse.unquote(href.removeprefix("#group="), errors="strict") == row["group"]
    # the script writes the hash the same way (the one place it sets it)
    assert SCRIPT.count("location.hash=") == 1
    assert "location.hash='group='+encodeURIComponent(r.dataset.group)" in SCRIPT


def test_texts_from_the_file_reach_the_page_as_text(tmp_path):
    rows = _rows(["<u>g0</u>", "<u>g0</u>", "<u>g0</u>", "<u>g0</u>", "g1"])
    injected = {
        "action": "<script>alert(1)</script>",
        "observation": "</pre><img src=x onerror=alert(2)>\r\nnext line",
        "anchor_text": '"><video src=x onerror=alert(3)>',
        "traj_id": 'x" onmouseover="alert(4)',
    }
    rows[0] = {**rows[0], **injected}
    rows[2] = {**rows[2], "anchor_text": injected["anchor_text"]}
    rows[3] = {**rows[3], "action": "half a pair: \ud800"}  # a lone surrogate, as JSON allows
    run = _run(
        tmp_path,
        rows,
        estimator="<object data=x></object>",
        source="</title><script>alert(5)</script>",
    )
    page_file = tmp_path / "page.html"
    assert main([str(run), "-o", str(page_file)]) == 0
    page = page_file.read_bytes().decode("utf-8")  # strict: the file is UTF-8
    parsed = _Page(page)
    tags = [tag for tag, _ in parsed.tags]
    assert tags.count("script") == 1  # the page's own
    assert not {"img", "video", "object", "iframe", "u"} & set(tags)
    assert not [name for _, attrs in parsed.tags for name in attrs if name.startswith("on")]
    text = "".join(parsed.text)
    for value in [*injected.values(), "<u>g0</u>", "<object data=x></object>"]:
        assert value in text, value
    assert "</title><script>alert(5)</script>" in text
    assert "half a pair: \ufffd" in text
    assert any(attrs.get("data-traj") == injected["traj_id"] for _, attrs in parsed.tags)


def test_numbers_too_large_for_a_chart_are_left_out(tmp_path):
    run = _run(tmp_path)
    # Numbers past what a metrics row may hold (an integer of 401 digits) are a named error
    # (training/guarded.py); numbers a row may hold, however large, are charted or left out.
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "x": 10**400}) + "\n")
    assert main([str(run), "-o", str(tmp_path / "page.html")]) == 2
    rows = [
        {"iteration": 0, "success_rate": 0, "mean_return": 1.7e308, "valid_action_rate": 0.5},
        {"iteration": 10**99, "success_rate": 1, "mean_return": -1.7e308, "valid_action_rate": 0.7},
        {
            "iteration": 17 * 10**98,
            "success_rate": 1,
            "mean_return": None,
            "valid_action_rate": 0.9,
        },
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page_file = tmp_path / "page.html"
    assert main([str(run), "-o", str(page_file)]) == 0
    charts = _Page(page_file.read_text(encoding="utf-8"))
    lines = [attrs["points"] for tag, attrs in charts.tags if tag == "polyline"]
    # success and valid-action rate (3 points each), mean return (2), the sign chart (1)
    assert sorted(len(points.split()) for points in lines) == [1, 2, 3, 3]
    for points in lines:
        for pair in points.split():
            x, y = (float(v) for v in pair.split(","))
            assert 0 <= x <= 360 and 0 <= y <= 220, points


# ----------------------------------------------------------------------------- inputs
def test_unreadable_inputs_are_named_errors(tmp_path, capsys):
    def rollout(run: Path) -> Path:
        return run / "rollouts" / "iteration_000000.jsonl.gz"

    def raw(run: Path, text: bytes) -> None:
        with gzip.open(rollout(run), "wb") as handle:
            handle.write(text)

    header = json.dumps(read_rollouts(write_rollouts(tmp_path / "good", 0, _rows()))[0])
    cases = {
        "deep": (lambda run: raw(run, (header + "\n" + "[" * 100_000).encode()), "nested too"),
        "long number": (
            lambda run: raw(run, (header[:-1] + ', "n": ' + "9" * 5000 + "}\n").encode()),
            "line 1: an integer of 5000 digits",
        ),
        "empty file": (lambda run: rollout(run).write_bytes(b""), "is empty"),
        "binary": (lambda run: rollout(run).write_bytes(bytes(range(256))), "not a readable"),
        "not UTF-8": (lambda run: raw(run, b"\xff\xfe{}\n"), "line 1 is not UTF-8 text"),
        "a folder": (
            lambda run: (rollout(run).unlink(), rollout(run).mkdir()),
            "not a readable",
        ),
        "metrics not UTF-8": (
            lambda run: (run / "metrics.jsonl").write_bytes(b'{"iteration": 0}\n\xff\xfe\n'),
            "metrics.jsonl is not readable JSON lines",
        ),
        "metrics a folder": (
            lambda run: (run / "metrics.jsonl").mkdir(),
            "metrics.jsonl is not readable JSON lines",
        ),
    }
    for name, (damage, message) in cases.items():
        run = tmp_path / name.replace(" ", "-")
        write_rollouts(run, 0, _rows())
        damage(run)
        _fails(run, capsys, message)
    # and where the page cannot go
    run = _run(tmp_path)
    (tmp_path / "taken").mkdir()
    assert main([str(run), "-o", str(tmp_path / "taken")]) == 2
    assert "cannot write the page to" in capsys.readouterr().err


def test_bad_numbers_on_the_command_line_are_usage_errors(tmp_path, capsys):
    run = _run(tmp_path)
    bad = (["--max-chars", "-1"], ["--max-chars", "0"], ["--max-chars", "100001"],
           ["--port", "70000"], ["--port", "-1"])  # fmt: skip
    for argv in bad:  # --max-chars 0 would show every text whole: no bound on the page
        with pytest.raises(SystemExit) as exited:
            main([str(run), *argv])
        assert exited.value.code == 2
        assert "must be" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --serve
def test_serve_answers_only_the_page(tmp_path):
    run = _run(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "secret.txt").write_text("not for the browser")
    (site / "sub").mkdir()
    (site / "sub" / "other.html").write_text("<p>nor this</p>")
    page = site / "my view.html"
    server = subprocess.Popen(
        [sys.executable, "-m", "training.cli.view", str(run), "-o", str(page), "--serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in server.stdout])
    reader.start()
    try:
        address = None
        while address is None:
            line = lines.get(timeout=120)
            address = re.match(r"serving (http://127\.0\.0\.1:(\d+)/\S+)", line)
        port = int(address.group(2))

        def get(target: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                connection.request(method, target)
                answer = connection.getresponse()
                return answer.status, dict(answer.getheaders()), answer.read()
            finally:
                connection.close()

        for target in (
            "/secret.txt", "/sub/other.html", "/sub/", "/../secret.txt", "/%2e%2e/secret.txt",
            "/my%20view.html/", "//secret.txt", f"/{run}/rollouts/iteration_000000.jsonl.gz",
        ):  # fmt: skip
            status, _, body = get(target)
            assert status == 404, target
            assert b"not for the browser" not in body and b"nor this" not in body
        for target in ("/my%20view.html", "/", "/my%20view.html?x=1#group=0"):
            status, headers, body = get(target)
            assert status == 200, target
            assert headers["Content-Type"] == "text/html; charset=utf-8"
            assert body == page.read_bytes()
        status, headers, body = get("/my%20view.html", "HEAD")
        assert status == 200 and body == b""
        assert int(headers["Content-Length"]) == page.stat().st_size
        assert address.group(1) == f"http://127.0.0.1:{port}/my%20view.html"
    finally:
        server.terminate()
        server.wait(timeout=30)
        reader.join(timeout=30)  # the pipe ends with the process
        server.stdout.close()
        server.stderr.close()


def test_texts_with_unicode_line_separators_read_back_whole(tmp_path):
    # The writer keeps non-ASCII text as it is (ensure_ascii=False); a reader that split at
    # every Unicode line break (U+2028, U+0085, U+001C...) would see broken JSON.
    rows = _rows()
    odd = "a\u2028b\u2029c\x85d\x1ce\x1df\x1eg\x0bh\x0ci"
    rows[0]["observation"] = odd
    rows[1]["action"] = odd
    path = write_rollouts(tmp_path / "run", 0, rows, estimator="gigpo")
    _, records = read_rollouts(path)
    assert records[0]["observation"] == odd and records[1]["action"] == odd
    assert len(records) == len(rows)


def test_a_version_1_file_is_read_and_its_summary_recomputed(tmp_path):
    from training.record_files import read_summary

    rows = _rows()
    path = write_rollouts(tmp_path / "run", 0, rows, estimator="gigpo")
    assert read_rollouts(path)[0]["version"] == SCHEMA_VERSION == 2
    header, _ = read_rollouts(path)
    # version 1's header summary had other names; its records were the same
    header.update(version=1, summary={"records": 5, "coverage": 0.9, "size_histogram": {"9": 9}})
    _rewrite(path, header, rows)
    assert read_rollouts(path)[1] == rows
    assert read_summary(path) == rows_summary(rows)
    assert read_summary(path)["step_group_sizes"] == {1: 3, 2: 1}


def test_a_rollout_file_that_unpacks_past_the_limit_is_refused(tmp_path, monkeypatch, capsys):
    import training.record_files as record_files

    run = _run(tmp_path)
    path = rollout_path(run, 0)
    header, rows = read_rollouts(path)
    size = len(gzip.decompress(path.read_bytes()))
    monkeypatch.setattr(record_files, "MAX_ROLLOUT_BYTES", size)  # exactly at the limit: read
    assert read_rollouts(path)[1] == rows
    # a few hundred bytes of gzip that unpack to a megabyte of padding after the records
    with gzip.open(path, "ab") as handle:
        handle.write(b" " * (1 << 20))
    assert path.stat().st_size < 10_000
    monkeypatch.setattr(record_files, "MAX_ROLLOUT_BYTES", 1 << 19)
    with pytest.raises(RolloutFileError, match=r"unpacks to over 524288 bytes") as caught:
        read_rollouts(path)
    assert str(path) in str(caught.value)
    _fails(run, capsys, str(path), "unpacks to over 524288 bytes")


def test_a_number_of_thousands_of_digits_names_the_file_and_line(tmp_path):
    from training.record_files import read_summary

    path = write_rollouts(tmp_path / "run", 0, _rows(), estimator="gigpo")
    header, rows = read_rollouts(path)
    huge = "9" * 4400  # past Python's own limit of 4300 digits (json.dumps cannot write it)
    lines = [json.dumps(header)] + [json.dumps(row) for row in rows]
    for line, reads in ((4, [read_rollouts]), (1, [read_rollouts, read_summary])):
        bad = list(lines)
        bad[line - 1] = bad[line - 1][:-1] + f', "n": {huge}}}'
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write("\n".join(bad) + "\n")
        for read in reads:  # read_summary reads the header line alone
            with pytest.raises(RolloutFileError, match=rf"line {line}: an integer of 4400 digits"):
                read(path)
