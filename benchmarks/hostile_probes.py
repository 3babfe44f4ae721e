"""The probes of ``benchmarks/hostile_cli.py``, command by command: the arguments (with the
placeholders of :mod:`hostile_plants`), what is planted first, what is checked after, and
whether exit 0 is the documented result. Every probe is cheap: a dry run where the command
has one, else a start that is refused (or, where the command accepts the input, a one-task
evaluation or a tiny-model run of seconds)."""

from __future__ import annotations

from hostile_planted import probes as planted
from hostile_plants import (
    BIG,
    DIGITS,
    Probe,
    absent,
    chain,
    copy,
    dangling,
    fifo,
    link,
    mkdir,
    outside_kept,
    page_bounded,
    remove,
    restarted,
    rollout_line,
    still_fifo,
    write,
)

DEEP = "[" * 100000 + "]" * 100000
DEEP_ARG = "[" * 30000 + "]" * 30000  # one argument is at most 128 KiB (MAX_ARG_STRLEN)
PWNED = absent("{d}/PWNED", "ran the YAML's !!python tag")
STATE, ROLLOUT_NAME = "{run}/checkpoint/state.json", "rollouts/iteration_000001.jsonl.gz"
ROLLOUT = "{run}/" + ROLLOUT_NAME


def train() -> list[Probe]:
    c = "gigpo-train"
    dry = [
        "--config",
        "smoke",
        "--dry-run",
        "--rollout.max_prompt_tokens=512",
        "--model.tiny_warmup_steps=0",
    ]
    fresh = ["--config", "smoke", "--out", "{d}/out", "--model.tiny_warmup_steps=0"]
    resume = ["--config", "smoke", "--out", "{run}", "--run.iterations=3"]  # 2 done: one more
    hgpo = ["--algo.estimator=hgpo", "--algo.length_alpha=1e300"]
    cap1 = "--rollout.max_prompt_tokens=1"  # below the first prompt's length
    overrides = {
        "unknown-flag": ["--bogus"], "misspelled-key": ["--algo.step_weigth=1"],
        "override-missing-value": ["--run.seed"], "seed-2**64": ["--run.seed=" + BIG],
        "seed-5000-digits": ["--run.seed=" + DIGITS], "seed-negative": ["--run.seed=-1"],
        "groups-zero": ["--env.num_groups=0"], "groups-3e6": ["--env.num_groups=3000000"],
        "groups-1e9": ["--env.num_groups=1e9"],
        "new-tokens-1e9": ["--rollout.max_new_tokens=1000000000"],
        "lr-nan": ["--optim.lr=.nan"], "lr-1e400": ["--optim.lr=1e400"],
        "step-weight-nan": ["--algo.step_weight=.nan"], "unknown-env": ["--env.id=gigpo/Nope-v0"],
        "env-kwargs-garbage": ["--env.kwargs={[: ]"],
        "model-path-absent": ["--model.name_or_path={d}/nope"],
        "tiny-model-huge": ["--model.tiny_hidden_size=100000"], "hgpo-weights-overflow": hgpo,
    }  # fmt: skip
    out = [Probe(c, f"dry-run-{name}", dry + args) for name, args in overrides.items()]
    out += [
        Probe(c, "config-missing-value", ["--config"]),
        Probe(c, "config-absent", ["--config", "{d}/nope.yaml", "--dry-run"]),
        Probe(c, "config-is-dir", ["--config", "{d}", "--dry-run"]),
        Probe(c, "config-fifo", ["--config", "{d}/c.yaml", "--dry-run"], fifo("{d}/c.yaml")),
        *[Probe(c, f"config-{name}", ["--config", f"{{fx}}/{name}.yaml", *dry[2:]])
          for name in ("huge", "deep", "alias", "nonutf8")],  # fmt: skip
        Probe(c, "config-python-tag", ["--config", "{fx}/pytag.yaml", *dry[2:]], check=PWNED),
        Probe(c, "yaml-duplicate-section", ["--config", "{fx}/dup_section.yaml", *dry[2:]]),
        Probe(c, "yaml-duplicate-key", ["--config", "{fx}/dup_key.yaml", *dry[2:]]),
        Probe(c, "dry-run-prompt-cap-below-first-prompt",
              ["--config", "smoke", "--dry-run", cap1], timeout=60),
        *[Probe(c, f"free-memory-{v}", dry, env={"GIGPO_FREE_MEMORY_GIB": v})
          for v in ("1e400", "nan", "-1")],
        Probe(c, "run-hgpo-weights-overflow", fresh + hgpo, timeout=60),
        Probe(c, "run-prompt-cap-below-first-prompt", fresh + [cap1], timeout=60),
        Probe(c, "run-device-absent", fresh + ["--model.device=cuda:99"], timeout=60),
        Probe(c, "out-is-file", fresh[:2] + ["--out", "{d}/f"], write("{d}/f", "x")),
        Probe(c, "out-is-fifo", fresh[:2] + ["--out", "{d}/f"], fifo("{d}/f")),
        Probe(c, "out-is-study-folder", fresh[:2] + ["--out", "{d}/s"],
              write("{d}/s/.gigpo-folder", '{"kind": "study"}')),
        *[Probe(c, f"resume-fifo-{name}", resume, fifo(path), timeout=60) for name, path in (
            ("kind-file", "{run}/.gigpo-folder"), ("config", "{run}/config.json"),
            ("metrics", "{run}/metrics.jsonl"), ("lock", "{run}/.gigpo.lock"))],
        # The run's tiny model is rebuilt whenever its marker cannot be read (a build is
        # deterministic: the same model), replacing the folder the run owns: exit 0.
        Probe(c, "resume-fifo-tiny-model-marker", resume,
              fifo("{run}/tiny-model/gigpo_tiny_model.json"), ok0=True, timeout=60),
        Probe(c, "resume-fifo-state", resume, fifo(STATE), restarted, timeout=60),
        Probe(c, "resume-dir-state", resume, mkdir(STATE), restarted, timeout=60),
        Probe(c, "resume-state-deep", resume, write(STATE, DEEP), timeout=60),
        Probe(c, "resume-state-bigint", resume,
              write(STATE, '{"format": 2, "iteration": ' + DIGITS + "}"), timeout=60),
        *[Probe(c, f"resume-symlink-{name}", resume, link(path), outside_kept, ok0=True,
                timeout=60) for name, path in (
            ("lock", "{run}/.gigpo.lock"), ("metrics", "{run}/metrics.jsonl"))],
        Probe(c, "resume-without-state-json", resume, remove(STATE), restarted, timeout=60),
        Probe(c, "sigint-while-training", fresh + ["--run.iterations=40"], ok0=True,
              sigint_on="train:", timeout=90),
    ]  # fmt: skip
    return out


def quickstart() -> list[Probe]:
    c = "gigpo-quickstart"
    cheap = ["--model.name_or_path=tiny-random", "--model.tiny_hidden_size=32",
             "--model.tiny_layers=2", "--model.tiny_warmup_steps=0", "--model.trainable_layers=0",
             "--run.iterations=1", "--env.num_groups=1", "--env.group_size=2", "--eval.groups=0",
             "--run.checkpoint_every=0"]  # fmt: skip
    out = ["--out", "{d}/qs"]
    return [
        Probe(c, "unknown-flag", cheap + out + ["--bogus"], timeout=60),
        Probe(c, "misspelled-key", cheap + out + ["--algo.step_weigth=1"], timeout=60),
        Probe(c, "out-missing-value", cheap + ["--out"]),
        Probe(c, "out-is-file", cheap + ["--out", "{d}/f"], write("{d}/f", "x"), timeout=60),
        Probe(c, "out-is-fifo", cheap + ["--out", "{d}/f"], fifo("{d}/f"), timeout=60),
        Probe(c, "out-in-checkpoint", cheap + ["--out", "{run}/checkpoint"], timeout=60),
        Probe(c, "out-in-tiny-model", cheap + ["--out", "{run}/tiny-model"], timeout=60),
        Probe(c, "out-in-run-folder", cheap + ["--out", "{run}"], timeout=60),
        Probe(c, "seed-2**64", cheap + out + ["--run.seed=" + BIG], timeout=60),
        Probe(c, "unknown-env", cheap + out + ["--env.id=gigpo/Nope-v0"], timeout=60),
        Probe(c, "free-memory-1e400", cheap + out, env={"GIGPO_FREE_MEMORY_GIB": "1e400"},
              timeout=60),
        Probe(c, "baseline-misspelled-key", ["--baseline", *cheap, *out, "--algo.step_weigth=1"],
              timeout=60),
        Probe(c, "sigint-while-training", cheap + out + ["--run.iterations=40"], ok0=True,
              sigint_on="train:", timeout=90),
    ]  # fmt: skip


def view() -> list[Probe]:
    c = "gigpo-view"
    page, vh, lock = "{d}/page.html", "{run}/view.html", "{run}/.view.html.lock"
    return [
        Probe(c, "no-args", []), Probe(c, "unknown-flag", ["{run}", "--bogus"]),
        Probe(c, "run-absent", ["{d}/nope"]), Probe(c, "run-is-suite-folder", ["{suite}"]),
        Probe(c, "run-is-file", ["{d}/f"], write("{d}/f", "x")),
        Probe(c, "run-is-fifo", ["{d}/f"], fifo("{d}/f")),
        Probe(c, "iteration-2**64", ["{run}", "--iteration", BIG]),
        Probe(c, "iteration-5000-digits", ["{run}", "--iteration", DIGITS]),
        Probe(c, "max-chars-5000-digits", ["{run}", "--max-chars", DIGITS]),
        Probe(c, "port-70000", ["{run}", "--serve", "--port", "70000"]),
        *[Probe(c, f"fifo-{name}", ["{run}"], fifo(f"{{run}}/{path}"), ok0=name == "config")
          for name, path in (("metrics", "metrics.jsonl"), ("config", "config.json"),
                             ("rollout", ROLLOUT_NAME))],  # the page says "no readable config.json"
        Probe(c, "fifo-rollouts-dir", ["{run}"], fifo("{run}/rollouts"), ok0=True),
        Probe(c, "rollout-not-gzip", ["{run}"], write(ROLLOUT, "plain text\n")),
        Probe(c, "rollout-deep-line", ["{run}"], rollout_line(DEEP)),
        Probe(c, "rollout-bigint", ["{run}"], rollout_line('{"iteration": ' + DIGITS + "}")),
        Probe(c, "rollout-17MiB-line", ["{run}"], rollout_line('"' + "x" * (17 << 20) + '"')),
        Probe(c, "metrics-deep", ["{run}"], write("{run}/metrics.jsonl", DEEP + "\n")),
        Probe(c, "out-fifo", ["{run}", "-o", page], fifo(page), still_fifo(page), ok0=True),
        Probe(c, "out-symlink", ["{run}", "-o", page], link(page), outside_kept, ok0=True),
        Probe(c, "out-is-dir", ["{run}", "-o", "{d}"]),
        Probe(c, "planted-page-symlink", ["{run}"], link(vh), outside_kept, ok0=True),
        Probe(c, "planted-page-fifo", ["{run}"], fifo(vh), still_fifo(vh), ok0=True),
        Probe(c, "planted-page-lock-symlink", ["{run}"], link(lock), outside_kept, ok0=True),
        Probe(c, "planted-page-lock-fifo", ["{run}"], fifo(lock), ok0=True),
        Probe(c, "page-bomb", ["{bomb}", "--iteration", "0", "-o", page],
              check=page_bounded(page), ok0=True, timeout=60),
        Probe(c, "sigint-while-serving", ["{run}", "--serve", "--port", "0"], ok0=True,
              sigint_on="wrote "),
    ]  # fmt: skip


def evaluate() -> list[Probe]:
    c, m = "gigpo-evaluate", ["--model", "{run}", "--out", "{d}/ev"]
    one = m + ["--episodes", "1"]
    s = ["--suite", "searchqa-sample", "--model", "{run}", "--max-episodes", "1", "--out", "{d}/sv"]
    again = s[:3] + ["{fx}/run"] + s[4:6] + ["--out", "{suite}"]
    manifest = s + ["--data-manifest", "{d}/m.json"]
    values = {
        "episodes": ("0", BIG, DIGITS, "3000000"), "temperature": ("nan",), "top-p": ("2",),
        "max-new-tokens": ("1000000000",), "batch-size": (BIG,),
    }  # fmt: skip
    out = [Probe(c, f"{flag}-{v if len(v) < 30 else 'huge'}", m + [f"--{flag}", v])
           for flag, vs in values.items() for v in vs]  # fmt: skip
    suite_only = {"group-size": "4", "max-episodes": "1", "data-dir": "{d}",
                  "retriever-url": "http://127.0.0.1:9", "data-manifest": "{d}/m.json"}  # fmt: skip
    out += [Probe(c, f"{flag}-without-suite", one + [f"--{flag}", v], timeout=60)
            for flag, v in suite_only.items()]  # fmt: skip
    out += [
        Probe(c, "no-model", []), Probe(c, "unknown-flag", one + ["--bogus"]),
        Probe(c, "unknown-env", one + ["--env.id=gigpo/Nope-v0"]),
        Probe(c, "model-absent", ["--model", "{d}/nope", "--episodes", "1"]),
        Probe(c, "model-fifo", ["--model", "{d}/f", "--episodes", "1"], fifo("{d}/f")),
        Probe(c, "model-run-without-state-json", one, remove(STATE)),
        Probe(c, "model-run-fifo-state", one, fifo(STATE)),
        Probe(c, "model-run-fifo-config", one, fifo("{run}/config.json")),
        Probe(c, "out-fifo", one[:2] + ["--out", "{d}/f", "--episodes", "1"], fifo("{d}/f")),
        Probe(c, "out-in-checkpoint", one[:2] + ["--out", "{run}/checkpoint", "--episodes", "1"],
              timeout=60),
        Probe(c, "out-in-tiny-model", one[:2] + ["--out", "{run}/tiny-model", "--episodes", "1"],
              timeout=60),
        Probe(c, "out-is-training-run", one[:2] + ["--out", "{run}", "--episodes", "1"]),
        Probe(c, "out-planted-summary-symlink", one, chain(
            write("{d}/ev/.gigpo-folder", '{"kind": "evaluate"}'), link("{d}/ev/summary.json")),
            outside_kept, ok0=True, timeout=60),
        Probe(c, "config-fifo", one + ["--config", "{d}/c.yaml"], fifo("{d}/c.yaml")),
        Probe(c, "config-duplicate-key", one + ["--config", "{fx}/dup_key.yaml"], timeout=60),
        Probe(c, "suite-absent", ["--suite", "nope", "--model", "{run}"]),
        Probe(c, "suite-fifo", ["--suite", "{d}/x.yaml", "--model", "{run}"], fifo("{d}/x.yaml")),
        Probe(c, "suite-is-dir", ["--suite", "{d}", "--model", "{run}"]),
        *[Probe(c, f"suite-{name}", ["--suite", f"{{fx}}/suites/{name}/searchqa-sample.yaml",
                                     *s[2:]], check=PWNED if "tag" in name else None, timeout=60)
          for name in ("duplicate-key", "kwargs-abspath", "kwargs-escape", "kwargs-fifo",
                       "files-dotdot", "python-tag")],
        Probe(c, "suite-group-size-2**64", s + ["--group-size", BIG]),
        Probe(c, "suite-max-episodes-2**64", s[:4] + ["--max-episodes", BIG], ok0=True,
              timeout=60),
        Probe(c, "suite-data-dir-fifo", s + ["--data-dir", "{d}/f"], fifo("{d}/f")),
        Probe(c, "suite-out-in-checkpoint", s[:6] + ["--out", "{run}/checkpoint"], timeout=60),
        Probe(c, "suite-data-manifest-fifo", manifest, fifo("{d}/m.json")),
        Probe(c, "suite-data-manifest-no-files", manifest, write("{d}/m.json", '{"files": []}')),
        Probe(c, "suite-data-manifest-deep", manifest, write("{d}/m.json", DEEP)),
        *[Probe(c, f"suite-resume-fifo-{name}", again, fifo(f"{{suite}}/{name}"),
                still_fifo(f"{{suite}}/{name}"), timeout=60)
          for name in ("run.json", "episodes.jsonl", "data_manifest.json", ".gigpo-folder")],
        Probe(c, "compare-absent", ["--compare", "{d}/nope"]),
        Probe(c, "compare-summary-fifo", ["--compare", "{suite}"], fifo("{suite}/summary.json")),
        Probe(c, "compare-summary-dir", ["--compare", "{suite}"], mkdir("{suite}/summary.json")),
        Probe(c, "compare-summary-deep", ["--compare", "{suite}"],
              write("{suite}/summary.json", DEEP)),
        Probe(c, "compare-summary-wrong-types", ["--compare", "{suite}"],
              write("{suite}/summary.json", '{"suite": 1, "parts": "x"}')),
        Probe(c, "compare-with-model", ["--compare", "{suite}", "--model", "{run}"]),
    ]  # fmt: skip
    return out


def export() -> list[Probe]:
    c = "gigpo-export"
    ok = ["{run}", "{d}/x"]
    return [
        Probe(c, "no-args", []), Probe(c, "unknown-flag", ok + ["--bogus"]),
        Probe(c, "dtype-bogus", ok + ["--dtype", "bogus"]),
        Probe(c, "run-absent", ["{d}/nope", "{d}/x"]), Probe(c, "out-exists", ["{run}", "{d}"]),
        Probe(c, "run-is-file", ["{d}/f", "{d}/x"], write("{d}/f", "x")),
        Probe(c, "run-is-fifo", ["{d}/f", "{d}/x"], fifo("{d}/f")),
        Probe(c, "out-fifo", ["{run}", "{d}/f"], fifo("{d}/f"), still_fifo("{d}/f"), ok0=True),
        Probe(c, "out-dangling-symlink", ok, dangling("{d}/x"),
              absent("{d}/elsewhere", "wrote through the dangling link"), ok0=True),
        Probe(c, "out-in-checkpoint", ["{run}", "{run}/checkpoint/export"]),
        Probe(c, "run-without-state-json", ok, remove(STATE)),
        Probe(c, "fifo-state", ok, fifo(STATE)), Probe(c, "state-deep", ok, write(STATE, DEEP)),
        Probe(c, "fifo-config", ok, fifo("{run}/config.json")),
        Probe(c, "fifo-weights", ok, fifo("{run}/checkpoint/model.safetensors")),
        Probe(c, "weights-huge-header", ok, write("{run}/checkpoint/model.safetensors",
                                                  b"\xff" * 7 + b"\x7f{}")),
    ]  # fmt: skip


def openrlhf() -> list[Probe]:
    c = "gigpo-openrlhf"
    flags = {
        "unknown-env": ["--env", "gigpo/Nope-v0"], "seed-2**64": ["--env.seed", BIG],
        "tasks-3e6": ["--env.num_tasks", "3000000"], "tasks-1e9": ["--env.num_tasks", "1000000000"],
        "tasks-zero": ["--env.num_tasks", "0"], "tasks-5000-digits": ["--env.num_tasks", DIGITS],
        "kwargs-garbage": ["--env.kwargs", '{"a":'], "kwargs-deep": ["--env.kwargs", DEEP_ARG],
        "kwargs-nan": ["--env.kwargs", '{"max_steps": NaN}'], "group-size-1": ["--group_size", "1"],
        "group-size-2**64": ["--group_size", BIG],
        "env-timeout-nan": ["--gigpo.env_timeout_s", "nan"],
        "env-workers-negative": ["--gigpo.env_workers", "-1"],
        "prompt-cap-zero": ["--gigpo.max_prompt_tokens", "0"],
        "new-tokens-2**64": ["--env.max_new_tokens", BIG],
        "missing-value": ["--env.num_tasks"],
        "estimator-bogus": ["--algo.advantage.estimator", "bogus"],
    }  # fmt: skip
    out = [Probe(c, name, ["--dry-run", *args]) for name, args in flags.items()]
    # a flag neither ours nor known here goes on to OpenRLHF's own parser (not installed here)
    out.append(Probe(c, "unknown-flag-for-openrlhf", ["--dry-run", "--bogus"], ok0=True))
    out += [Probe(c, f"GPUS={v[:20]}", ["--dry-run"], env={"GPUS": v})
            for v in ("abc", "0", "9" * 30)]  # fmt: skip
    return out


def verl() -> list[Probe]:
    c = "gigpo-verl"
    flags = {
        "unknown-env": ["--env", "gigpo/Nope-v0"], "tasks-2**64": ["--env.num_tasks", BIG],
        "tasks-3e6": ["--env.num_tasks", "3000000"],
        "tasks-5000-digits": ["--env.num_tasks", DIGITS],
        "kwargs-garbage": ["--env.kwargs", '{"a":'], "kwargs-deep": ["--env.kwargs", DEEP_ARG],
        "unknown-flag": ["--bogus"], "missing-value": ["--env.num_tasks"], "bare-word": ["oops"],
        "estimator-bogus": ["algorithm.adv_estimator=bogus"], "gamma-nan": ["algorithm.gamma=nan"],
        "step-weight-1e400": ["algorithm.gigpo.step_advantage_w=1e400"],
        "misspelled-setting": ["algorithm.gigpo.step_weigth=1"],
        "kl-in-reward": ["algorithm.use_kl_in_reward=True"],
        "hgpo-weights-overflow": ["algorithm.adv_estimator=hgpo",
                                  "algorithm.hgpo.length_alpha=1e300"],
        "workers-2**64": ["--env.workers", BIG],
    }  # fmt: skip
    return [Probe(c, name, ["--dry-run", *args]) for name, args in flags.items()]


def study() -> list[Probe]:
    c = "training.study"
    tail = ["--jobs", "1", "--out", "{d}/st"]
    base = ["--config", "smoke", "--seeds", "0", "--estimators", "grpo", *tail]

    def given(**changes: list[str]) -> list[str]:
        args = {"--config": ["smoke"], "--seeds": ["0"], "--estimators": ["grpo"], "--jobs": ["1"],
                "--out": ["{d}/st"]}  # fmt: skip
        args.update({f"--{k}": v for k, v in changes.items()})
        return [x for flag, values in args.items() for x in ([flag, *values] if values else [])]

    cases = {
        "seeds-2**64": given(seeds=[BIG]), "seeds-5000-digits": given(seeds=[DIGITS]),
        "seeds-10001": given(seeds=[str(i) for i in range(10001)]),
        "jobs-zero": given(jobs=["0"]), "jobs-2**64": given(jobs=[BIG]),
        "threads-2**64": base + ["--threads", BIG], "estimators-bogus": given(estimators=["bogus"]),
        "arm-misspelled": given(estimators=[]) + ["--arm", "gigpo:step_weigth=1"],
        "axis-nan": base + ["--axis", "step_weight=nan,1"],
        "study-fifo": ["--study", "{d}/s.yaml", *tail],
        "study-duplicate-key": ["--study", "{fx}/study_dup.yaml", *tail],
        "study-deep": ["--study", "{fx}/deep.yaml", *tail],
        "config-fifo": given(config=["{d}/c.yaml"]),
        "config-duplicate-key": given(config=["{fx}/dup_key.yaml"]),
        "out-fifo": given(out=["{d}/f"]), "out-is-training-run": given(out=["{run}"]),
        "unknown-flag": base + ["--bogus"],
    }  # fmt: skip
    plants = {"study-fifo": fifo("{d}/s.yaml"), "config-fifo": fifo("{d}/c.yaml"),
              "out-fifo": fifo("{d}/f")}  # fmt: skip
    out = [Probe(c, name, args, plants.get(name), timeout=120) for name, args in cases.items()]
    out.append(Probe(c, "study-python-tag", ["--study", "{fx}/pytag.yaml", *tail], check=PWNED))
    return out


def retrieval() -> list[Probe]:
    c = "retrieval_server"

    def ix(corpus: str, out: str = "{d}/ix", *more: str) -> list[str]:
        return ["index", "--corpus", corpus, "--out", out, "--quiet", *more]

    good = "{fx}/corpus.jsonl"
    serve = ["serve", "--index", "{index}", "--port", "0"]
    return [
        Probe(c, "no-args", []), Probe(c, "corpus-is-dir", ix("{d}")),
        Probe(c, "corpus-absent", ix("{d}/nope.jsonl")),
        Probe(c, "corpus-fifo", ix("{d}/c.jsonl"), fifo("{d}/c.jsonl")),
        *[Probe(c, f"corpus-{name}", ix(f"{{fx}}/corpus_{name}.jsonl"))
          for name in ("nested", "bigint", "nonutf8")],
        Probe(c, "out-existing-index", ix(good, "{index}")),
        Probe(c, "out-is-file", ix(good, "{d}/f"), write("{d}/f", "x")),
        Probe(c, "out-fifo", ix(good, "{d}/f"), fifo("{d}/f"), still_fifo("{d}/f"), ok0=True),
        Probe(c, "out-planted-meta-symlink", ix(good, "{index}"), link("{index}/meta.json"),
              outside_kept, ok0=True),
        Probe(c, "out-planted-docs-symlink", ix(good, "{index}"), link("{index}/docs.jsonl"),
              outside_kept, ok0=True),
        *[Probe(c, f"index-{flag}-{v}", ix(good, "{d}/ix", f"--{flag}", v)) for flag, v in (
            ("k1", "nan"), ("k1", "1e400"), ("backend", "bogus"), ("max-seq-length", BIG))],
        Probe(c, "serve-index-absent", ["serve", "--index", "{d}/nope"]),
        Probe(c, "serve-index-fifo-meta", serve, fifo("{index}/meta.json")),
        Probe(c, "serve-index-fifo-docs", serve, fifo("{index}/docs.jsonl")),
        Probe(c, "serve-index-deep-meta", serve, write("{index}/meta.json", DEEP)),
        Probe(c, "serve-corpus-fifo", ["serve", "--corpus", "{d}/c.jsonl", "--port", "0"],
              fifo("{d}/c.jsonl")),
        *[Probe(c, f"serve-{flag}-{v[:20]}", serve + [f"--{flag}", v]) for flag, v in (
            ("port", "70000"), ("workers", "1000000000"),
            ("shutdown-timeout-s", "nan"), ("max-queries", BIG), ("batch-window-s", "nan"),
            ("host", "256.1.1.1"))],
        Probe(c, "sigint-while-serving", serve, ok0=True, sigint_on="listening on"),
    ]  # fmt: skip


def envs() -> list[Probe]:
    c = "gigpo_envs"
    play = ["play", "gigpo/Sokoban-v0"]
    return [
        Probe(c, "no-args", []), Probe(c, "play-unknown-env", ["play", "gigpo/Nope-v0"]),
        *[Probe(c, f"play-{flag}-{v if len(v) < 30 else 'huge'}", play + [f"--{flag}", v])
          for flag, v in (("seed", "-1"), ("seed", BIG), ("seed", DIGITS), ("history", BIG))],
        Probe(c, "play-stdin-eof", play + ["--seed", "1"], ok0=True),
        Probe(c, "sigint-while-playing", play + ["--seed", "1"], ok0=True, sigint_on="> ",
              stdin_open=True),
    ]  # fmt: skip


def checkpoint() -> list[Probe]:
    c = "training.local.checkpoint"
    trust, pickled = ["{run}", "--trust-pickle"], "{run}/checkpoint/state.pt"
    return [
        Probe(c, "no-trust-flag", ["{run}"]), Probe(c, "no-pickle", trust),
        Probe(c, "run-is-file", ["{d}/f", "--trust-pickle"], write("{d}/f", "x")),
        Probe(c, "run-is-fifo", ["{d}/f", "--trust-pickle"], fifo("{d}/f")),
        Probe(c, "pickle-fifo", trust, fifo(pickled)),
        Probe(c, "pickle-garbage", trust, write(pickled, "garbage")),
        Probe(c, "pickle-is-list", ["{d}/pl", "--trust-pickle"],
              copy("{fx}/pickle_list", "{d}/pl")),
        Probe(c, "pickle-without-keys", ["{d}/pk", "--trust-pickle"],
              copy("{fx}/pickle_keys", "{d}/pk")),
        Probe(c, "kind-file-fifo", trust, fifo("{run}/.gigpo-folder")),
        Probe(c, "study-folder", ["{d}/s", "--trust-pickle"],
              write("{d}/s/.gigpo-folder", '{"kind": "study"}')),
    ]  # fmt: skip


def probes() -> list[Probe]:
    return [*train(), *quickstart(), *view(), *evaluate(), *export(), *openrlhf(), *verl(),
            *study(), *retrieval(), *envs(), *checkpoint(), *planted()]  # fmt: skip
