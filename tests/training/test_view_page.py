"""The viewer's page where a newcomer reads it, on a real run (the quick start's layout: the
folder ``gigpo`` of GiGPO on NumberLine with an invalid-action penalty): where the page may
be written, its title, its links to iterations, the penalty on invalid steps, and its
charts' axes. The page is checked as HTML, as a browser would read it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from training.cli.view import main
from training.folders import KIND_FILE, KINDS
from training.local.metrics import read_metrics
from training.local.train import train
from training.locks import hold_folder
from training.record_files import read_rollouts, rollout_files, rollout_rows, write_rollouts
from training.viewer.page import VIEW_FILE, build_page

ITERATIONS = 6
PENALTY = 0.5


@pytest.fixture(scope="module")
def numberline_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A real run like the quick start's ``runs/quickstart/gigpo``, 6 iterations, every one
    saved, a checkpoint, the tiny model writing some invalid actions."""
    from training.local.config import load_config

    out = tmp_path_factory.mktemp("viewpage") / "gigpo"
    config = load_config(
        None,
        [
            f"--model.name_or_path={tiny_model_dir}", "--env.id=gigpo/NumberLine-v0",
            "--env.kwargs={max_position: 3, max_steps: 3}", "--env.num_groups=2",
            "--env.group_size=3", "--eval.groups=2", "--eval.every=2",
            "--rollout.max_new_tokens=6", "--algo.minibatch_size=9", "--optim.lr=1e-3",
            f"--algo.invalid_penalty={PENALTY}", f"--run.iterations={ITERATIONS}",
            "--run.progress=false", "--run.threads=1", f"--out={out}",
        ],
    )  # fmt: skip
    train(config)
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    """A copy of ``run`` to write beside and into, its name kept."""
    copy = tmp_path / "runs" / run.name
    shutil.copytree(run, copy)
    return copy


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with a digest of its bytes (``dir`` for a folder)."""
    digest = {
        p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }
    return {str(p.relative_to(folder)): digest.get(p, "dir") for p in sorted(folder.rglob("*"))}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *named: object) -> str:
    """Runs the viewer; checks it exits 2 with one error line naming each of ``named``."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m training.cli.view: error: ") and err.count("\n") == 1, err
    for piece in named:
        assert str(piece) in err, (piece, err)
    return err


# ----------------------------------------------------------------------------- where it goes
def test_a_page_inside_a_run_is_refused_and_the_run_left_as_it_was(
    numberline_run, tmp_path, capsys
):
    run = _copy(numberline_run, tmp_path)
    owner = run.resolve()
    linked_checkpoint, linked_run = tmp_path / "linked-checkpoint", tmp_path / "linked-run"
    linked_checkpoint.symlink_to(run / "checkpoint", target_is_directory=True)
    linked_run.symlink_to(run, target_is_directory=True)
    assert {"model.safetensors", "optimizer.pt", "state.json"} <= {
        p.name for p in (run / "checkpoint").iterdir()
    }
    targets = [
        run / "checkpoint" / "state.json", run / "checkpoint" / "model.safetensors",
        run / "checkpoint" / "optimizer.pt", run / "metrics.jsonl", run / "config.json",
        run / KIND_FILE, run / ".gigpo.lock", run / "curve.png",
        rollout_files(run)[0], run / "tensorboard" / "page.html",
        run / "page.html",  # a new name in the run's root: not the viewer's own
        run / "checkpoint" / "new" / "page.html",  # no folder is made for it either
        run / "rollouts" / ".." / "config.json",
        linked_checkpoint / "state.json", linked_run / "metrics.jsonl",  # through a link
        linked_checkpoint / VIEW_FILE,  # the default's name, but in the checkpoint
    ]  # fmt: skip
    with hold_folder(run, "train", "gigpo-train"):  # as while it trains: .gigpo.lock there
        before = _snapshot(run)
        for target in targets:
            err = _refused([str(run), "-o", str(target)], capsys, target, owner)
            assert "training run" in err and "use an -o outside it" in err
        # the run given through a link, the page named through it
        _refused([str(linked_run), "-o", str(linked_run / "config.json")], capsys, owner)
        assert _snapshot(run) == before  # nothing replaced, nothing added
    assert json.loads((run / "checkpoint" / "state.json").read_text())


def test_a_page_inside_a_study_an_evaluation_or_a_suite_is_refused(tmp_path, capsys):
    run = tmp_path / "some-run"  # a run's rollouts alone: no folder of any command's
    rows = rollout_rows(
        0, group_ids=[0, 0], traj_ids=[0, 1], rewards=[0.0, 1.0], is_action_valid=[True, False],
        anchors=["s", "s"], anchor_texts=["s", "s"], observations=["o", "o"],
        actions=["a", "b"], step_group_ids=[0, 0], episode_advantages=[-1.0, 1.0],
        step_advantages=[-1.0, 1.0], advantages=[-2.0, 2.0], returns=[-0.5, 1.0],
    )  # fmt: skip
    write_rollouts(run, 0, rows)
    for kind, name in (("study", "study.md"), ("evaluate", "summary.json"),
                       ("suite", "run.json")):  # fmt: skip
        folder = tmp_path / kind
        with hold_folder(folder, kind, "a command"):
            (folder / name).write_text("{}\n")
        before = _snapshot(folder)
        for target in (folder / name, folder / "page.html", folder / "deep" / VIEW_FILE):
            _refused([str(run), "-o", str(target)], capsys, target, folder.resolve(), KINDS[kind])
        assert _snapshot(folder) == before
    # an older run, without a kind file: config.json beside metrics.jsonl
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "config.json").write_text("{}\n")
    (old / "metrics.jsonl").write_text("")
    _refused([str(run), "-o", str(old / "metrics.jsonl")], capsys, old.resolve())
    assert (old / "metrics.jsonl").read_text() == ""
    # the folder the page is read from, though no command's: its rollouts, any new name
    for target in (rollout_files(run)[0], run / "page.html"):
        _refused([str(run), "-o", str(target)], capsys, target, run.resolve(), "made from")
    assert read_rollouts(rollout_files(run)[0])[1] == rows


def test_the_default_page_and_a_page_beside_the_run_are_written(numberline_run, tmp_path):
    run = _copy(numberline_run, tmp_path)
    for argv in ([str(run)], [str(run)], [str(run), "-o", str(run / VIEW_FILE)]):
        assert main(argv) == 0  # written, then written again over the viewer's own page
        assert (run / VIEW_FILE).read_text().startswith("<!doctype html>")
    linked = tmp_path / "linked"
    linked.symlink_to(run, target_is_directory=True)
    assert main([str(linked)]) == 0  # its own page, through the link
    beside = [run.parent / "page.html", run / ".." / "other.html", tmp_path / "site" / "p.html"]
    for target in beside:
        assert main([str(run), "-o", str(target)]) == 0
        assert target.read_text().startswith("<!doctype html>")
    # another run's view.html is not this run's page
    other = _copy(numberline_run, tmp_path / "second")
    assert main([str(run), "-o", str(other / VIEW_FILE)]) == 2
    assert not (other / VIEW_FILE).exists()


# ----------------------------------------------------------------------------- what it says
class _Page(HTMLParser):
    """The page's title, its stats rows (iteration, link), the ids and ``data-iteration`` of
    its elements, the step cells of each group (attributes and text), and per chart its
    title and texts (each with its attributes)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.title = ""
        self.where: list[str] = []
        self.ids: dict[str, dict[str, str | None]] = {}
        self.stats: list[dict] = []
        self.cells: list[dict] = []
        self.headers: dict[str, str] = {}
        self.header: str | None = None
        self.charts: list[dict] = []
        self.text: list[str] = []
        self.cell_depth = 0
        self.text_attrs: dict[str, str | None] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.where.append(tag)
        if a.get("id"):
            self.ids[a["id"]] = a
        if tag == "tr" and "data-iteration" in a:
            self.stats.append({"iteration": int(a["data-iteration"]), "href": None, "text": ""})
        elif tag == "a" and self.stats and "tr" in self.where and self.stats[-1]["href"] is None:
            self.stats[-1]["href"] = a["href"]
        elif tag == "td" and "step" in (a.get("class") or "").split():
            self.cells.append({**a, "text": ""})
            self.cell_depth = 1
        elif tag == "td" and self.cell_depth:
            self.cell_depth += 1
        elif tag == "th" and "data-traj" in a:
            self.header = a["data-traj"]
            self.headers[self.header] = ""  # the same in a group's template and opened
        elif tag == "svg":
            self.charts.append({"title": a.get("aria-label"), "texts": []})
        elif tag == "text":
            self.text_attrs = a

    def handle_endtag(self, tag: str) -> None:
        while self.where and self.where.pop() != tag:
            pass
        if tag == "th":
            self.header = None
        if tag == "td" and self.cell_depth:
            self.cell_depth -= 1
        elif tag == "text":
            self.text_attrs = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.where and self.where[-1] == "title" and "svg" not in self.where:
            self.title += data
        if self.cell_depth:
            self.cells[-1]["text"] += data
        elif self.header is not None:
            self.headers[self.header] += data
        if self.stats and "tr" in self.where and "svg" not in self.where:
            self.stats[-1]["text"] += data
        if self.text_attrs is not None and self.charts:
            self.charts[-1]["texts"].append((data, self.text_attrs))


def test_the_title_says_the_run_the_estimator_and_the_env_once_each(numberline_run):
    page = _Page(build_page(numberline_run)[0])
    assert page.title == "gigpo on NumberLine-v0"  # was "gigpo: gigpo on gigpo/NumberLine-v0"
    words = [w.casefold() for w in re.findall(r"[A-Za-z0-9]+", page.title)]
    assert len(words) == len(set(words)), page.title
    assert "run folder gigpo" in "".join(page.text)  # the folder is still named


def test_each_iteration_link_opens_that_iteration_and_the_page_says_how_to_see_another(
    numberline_run,
):
    for asked in (None, 0, 3):
        html, info = build_page(numberline_run, iteration=asked)
        page, shown = _Page(html), info["iteration"]
        assert [row["iteration"] for row in page.stats] == list(range(ITERATIONS))
        for row in page.stats:
            if row["iteration"] == shown:  # the page holds its groups: the link goes there
                assert row["href"] and row["href"].startswith("#"), row
                section = page.ids[row["href"][1:]]
                assert section["data-iteration"] == str(shown)
            else:  # no link to what is not on the page; the option that shows it instead
                assert row["href"] is None, row
                assert f"--iteration {row['iteration']}" in row["text"], row
        text = "".join(page.text)
        assert f"This page holds the step records of iteration {shown} alone" in text
        assert f"gigpo-view {numberline_run} --iteration " in text


def test_an_invalid_step_shows_the_penalty_its_return_and_advantages_hold(numberline_run, tmp_path):
    saved = rollout_files(numberline_run)
    chosen = [it for it, path in saved.items()
              if any(not r["is_action_valid"] for r in read_rollouts(path)[1])]  # fmt: skip
    assert chosen, "the tiny model wrote no invalid action: nothing to check"
    records = read_rollouts(saved[chosen[-1]])[1]
    html, _ = build_page(numberline_run, iteration=chosen[-1])
    page = _Page(html)
    cells = {(int(c["data-traj"]), int(c["data-step"])): c for c in page.cells}
    assert len(cells) == len(records)
    for r in records:
        text = cells[(r["traj_id"], r["step"])]["text"]
        if r["is_action_valid"]:
            assert "penalty" not in text, text
        else:  # the return less the reward: what the reward alone does not show
            assert f"reward {r['reward']:.3f}, invalid-action penalty -{PENALTY:.3f}" in text
    # a trajectory's header: its return is its rewards less its penalties
    assert set(page.headers) == {str(r["traj_id"]) for r in records}
    for traj, header in page.headers.items():
        steps = [r for r in records if str(r["traj_id"]) == traj]
        invalid = sum(not r["is_action_valid"] for r in steps)
        if invalid:
            total = sum(r["reward"] for r in steps)
            assert f"return {total - PENALTY * invalid:.2f} (rewards {total:.2f}, " in header
    assert f"invalid-action penalty, {PENALTY:g} (algo.invalid_penalty)" in "".join(page.text)
    # a folder without the run's config: the page says the penalty is not known
    bare = tmp_path / "bare"
    shutil.copytree(numberline_run / "rollouts", bare / "rollouts")
    text = "".join(_Page(build_page(bare, iteration=chosen[-1])[0]).text)
    assert "invalid-action penalty is not known here" in text


RATES = ("success rate", "valid-action rate", "step-group coverage",
         "A_S against A_E: opposite signs")  # fmt: skip


def _axes(run: Path) -> dict[str, dict[str, list[str]]]:
    """Per chart of the page of ``run``, its axes' texts: ``x`` and ``y`` ticks, ``x_label``
    (what the x axis counts), ``y_label`` (text turned upright beside the y axis)."""
    page = _Page(build_page(run)[0])
    axes = {}
    for chart in page.charts:
        texts = [(text, a) for text, a in chart["texts"] if "tick" in (a.get("class") or "")]
        upright = [(text, a) for text, a in texts if "rotate" in (a.get("transform") or "")]
        flat = [(text, a) for text, a in texts if not a.get("transform")]
        axes[chart["title"]] = {
            "x": [t for t, a in flat if a.get("text-anchor") == "middle" and t != "iteration"],
            "y": [t for t, a in flat if a.get("text-anchor") == "end"],
            "x_label": [t for t, _ in flat if t == "iteration"],
            "y_label": [t for t, _ in upright],
        }
    assert set(RATES) | {"mean return"} <= set(axes)
    return axes


def test_every_chart_names_its_axes_with_their_units(numberline_run):
    axes = _axes(numberline_run)
    for title, axis in axes.items():
        assert axis["x_label"] == ["iteration"], title
        assert len(axis["y_label"]) == 1 and axis["y_label"][0].strip(), (title, axis)
    assert axes["mean return"]["y_label"] == ["reward per episode"]
    assert axes["step-group coverage"]["y_label"] == ["share of step records"]
    assert axes["success rate"]["y_label"] == ["share of episodes won"]


def test_a_rate_is_drawn_on_0_to_1(numberline_run):
    # the run's coverage lies between 0.8 and 1: on an axis of its own range, a fall from
    # 1.00 to 0.94 would fill the chart's height
    coverage = [r["step_group_coverage"] for r in read_metrics(numberline_run)]
    assert min(coverage) > 0.5, coverage
    for title, axis in _axes(numberline_run).items():
        if title in RATES:
            assert axis["y"] == ["0.00", "0.50", "1.00"], (title, axis["y"])


def test_the_iteration_axis_is_ticked_at_whole_iterations(numberline_run):
    for title, axis in _axes(numberline_run).items():
        assert axis["x"] == [str(i) for i in range(ITERATIONS)], (title, axis["x"])


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (0, 5, [0, 1, 2, 3, 4, 5]),
        (0, 10, [0, 2, 4, 6, 8, 10]),
        (0, 7, [0, 2, 4, 6]),
        (-0.5, 0.5, [0]),  # one iteration: the axis padded by half an iteration
        (3, 17, [5, 10, 15]),
        (0, 99_999, [0, 20_000, 40_000, 60_000, 80_000]),
    ],
)
def test_iteration_ticks_are_whole_and_evenly_spaced(low, high, ticks):
    from training.viewer.charts import iteration_ticks

    assert iteration_ticks(low, high) == ticks
