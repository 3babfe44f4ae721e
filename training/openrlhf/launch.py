"""GiGPO on OpenRLHF from an install: ``gigpo-openrlhf [--dry-run] [flags...]``.

Also ``python -m training.openrlhf.launch``; ``bash training/openrlhf_gigpo.sh`` (in a clone)
is a thin wrapper around it. It resolves the run's flags (OpenRLHF 0.11's own plus ours, see
:mod:`training.openrlhf.command`) over the defaults of :data:`DEFAULTS` (a flag given
replaces the default of the same name), then submits ``python -m training.openrlhf.train``
to Ray: it joins ``$RAY_ADDRESS`` when set, else starts a local head node if none is
running. ``--dry-run`` prints the submit command and the fully resolved OpenRLHF command and
starts nothing.

While it runs the job (``ray job submit`` follows it to its end) the launcher holds the run's
``--gigpo.dataset_dir``, where the job writes ``tasks.jsonl`` and ``rollouts/``
(:func:`training.locks.hold_folder`, kind ``openrlhf``): a second launch into the same
folder is refused, naming the holder. ``--dry-run`` takes no lock and writes nothing.

Environment: ``PYTHON`` (the interpreter the job runs, default this one), ``GPUS`` (GPUs per
node, default 8; on ``--gigpo.device cpu`` the slots Ray declares, each a process),
``RAY_DASHBOARD`` (default ``http://127.0.0.1:8265``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from training.commands import interrupted, invoked_as

#: How the job's own check (``python -m training.openrlhf.train --dry-run``) names itself.
TRAIN_PROG = "python -m training.openrlhf.train"


def defaults(gpus: str, async_enable: bool = False) -> list[str]:
    """The launcher's default flags for one node of ``gpus`` GPUs (Qwen2.5-1.5B, Sokoban).

    Everything is colocated: the actor, the reference and the vLLM engines share every GPU,
    the engines sleeping while the models train. With ``async_enable`` the engines generate
    while the models train, so they cannot share GPUs (OpenRLHF then colocates the DeepSpeed
    models only): the node is split, half its GPUs (rounded down) for the actor and the
    reference, the rest for the engines. ``--data.max_len`` (and the step layout's prompt
    cap and history) are resolved per env by :func:`training.openrlhf.command.plan`."""
    total = int(gpus)
    models = str(max(1, total // 2)) if async_enable else gpus
    engines = str(max(1, total - total // 2)) if async_enable else gpus
    return [
        "--actor.model_name_or_path", "Qwen/Qwen2.5-1.5B-Instruct",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", models,
        "--ref.num_nodes", "1", "--ref.num_gpus_per_node", models,
        "--vllm.num_engines", engines, "--vllm.tensor_parallel_size", "1",
        "--vllm.gpu_memory_utilization", "0.6", "--vllm.enable_sleep", "--train.colocate_all",
        "--ds.zero_stage", "3", "--ds.param_dtype", "bf16",
        "--rollout.max_new_tokens", "512",
        "--rollout.batch_size", "16", "--rollout.micro_batch_size", "8",
        "--rollout.temperature", "1.0",
        "--train.batch_size", "128", "--train.micro_batch_size", "4",
        "--train.max_epochs", "1", "--train.num_episodes", "20",
        "--actor.adam.lr", "1e-6",
        "--algo.kl.use_loss", "--algo.kl.init_coef", "0.01", "--algo.kl.estimator", "k3",
        "--ckpt.output_dir", "runs/openrlhf_gigpo/final", "--ckpt.path", "runs/openrlhf_gigpo/ckpt",
        "--logger.logging_steps", "1",
        "--env", "gigpo/Sokoban-v0", "--env.max_new_tokens", "512",
        "--group_size", "8",
        "--algo.advantage.estimator", "gigpo",
    ]  # fmt: skip


def cpu_defaults() -> list[str]:
    """The launcher's default flags on ``--gigpo.device cpu``: the GPU defaults but one slot
    for the actor and the reference together and one for an engine (Ray's GPU slots are
    processes there), without vLLM's sleep mode and CUDA IPC (``--train.colocate_all``)."""
    out = defaults("1")
    for switch in ("--vllm.enable_sleep", "--train.colocate_all"):
        out.remove(switch)
    return [*out, "--train.colocate_actor_ref"]


#: Flags that name the same setting: giving one replaces the default of the other.
SYNONYMS = {"--group_size": ("--rollout.n_samples_per_prompt",)}
#: Default flags that a user's flag turns off: OpenRLHF refuses ``--vllm.enable_sleep`` with
#: ``--train.async_enable`` (the engines keep generating while the trainer trains).
DISPLACED_BY = {"--vllm.enable_sleep": ("--train.async_enable",)}


def resolve(user: list[str], default: list[str]) -> list[str]:
    """The default flags the user did not give (with their values), then the user's flags; a
    default that a given flag displaces (:data:`DISPLACED_BY`) is left out too."""
    given = {arg.split("=", 1)[0] for arg in user if arg.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(default):
        flag = default[i]
        value = []
        if i + 1 < len(default) and not default[i + 1].startswith("--"):
            value = [default[i + 1]]
            i += 1
        i += 1
        if flag in given or any(s in given for s in SYNONYMS.get(flag, ())):
            continue
        if any(d in given for d in DISPLACED_BY.get(flag, ())):
            continue
        out += [flag, *value]
    return out + user


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in args
    user = [a for a in args if a != "--dry-run"]
    python = os.environ.get("PYTHON") or sys.executable
    dashboard = os.environ.get("RAY_DASHBOARD", "http://127.0.0.1:8265")
    gpus = os.environ.get("GPUS", "8")
    prog = invoked_as("training.openrlhf.launch")
    from training.openrlhf.layout import MAX_DEVICES, flag_value

    if not (gpus.isascii() and gpus.isdigit()) or not 1 <= int(gpus) <= MAX_DEVICES:
        print(f"{prog}: error: GPUS must be an int >= 1 and <= {MAX_DEVICES}, got "
              f"{gpus[:40]!r}", file=sys.stderr)  # fmt: skip
        return 2
    async_enable = any(a.split("=", 1)[0] == "--train.async_enable" for a in user)
    on_cpu = flag_value(user, "--gigpo.device", "cuda") == "cpu"
    resolved = resolve(user, cpu_defaults() if on_cpu else defaults(gpus, async_enable))
    train = [python, "-m", "training.openrlhf.train", *resolved]
    submit = ["ray", "job", "submit", "--address", dashboard, "--", *train]
    check = [python, "-m", "training.openrlhf.train", "--dry-run", *resolved]
    if dry_run:
        print("# submit:")
        print(shlex.join(submit))
        print("# resolved (inside the job):", flush=True)
        return _check(check, prog, None)
    # every flag is checked here, before Ray is started or joined (the job checks again)
    code = _check(check, prog, subprocess.DEVNULL)
    if code:
        return code
    if async_enable and not os.environ.get("RAY_ADDRESS"):
        need = _async_gpus(resolved)
        if need > int(gpus):
            print(f"{prog}: error: --train.async_enable needs {need} GPUs (the actor's "
                  "and the vLLM engines', which cannot share them) on this one node of "
                  f"GPUS={gpus}", file=sys.stderr)  # fmt: skip
            return 2
    from training.locks import FolderLockError, hold_folder

    folder = flag_value(resolved, "--gigpo.dataset_dir", "runs/openrlhf_gigpo")
    try:
        lock = hold_folder(folder, "openrlhf", "gigpo-openrlhf", "--gigpo.dataset_dir")
    except FolderLockError as exc:  # another launch writes there, or another kind of folder
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        if shutil.which("ray") is None:
            print(f"{prog}: error: the ray command is not installed: pip install "
                  "'gigpo[openrlhf]'", file=sys.stderr)  # fmt: skip
            lock.discard()  # a folder made just now is removed again
            return 2
        if not os.environ.get("RAY_ADDRESS"):
            running = subprocess.call(["ray", "status"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) == 0  # fmt: skip
            if not running:
                start = ["ray", "start", "--head", "--num-gpus", gpus]
                if on_cpu:  # slots, not devices; more logical CPUs than the cores OpenRLHF asks
                    start += ["--num-cpus", str(max(16, os.cpu_count() or 1))]
                subprocess.check_call([*start, "--dashboard-host", "127.0.0.1"])
        return subprocess.call(submit)  # the lock's file is not inherited (O_CLOEXEC)
    except KeyboardInterrupt:  # the submit client stops following the job, which goes on
        return interrupted(
            prog, "stopped following the Ray job, which goes on running in the cluster: see "
            "'ray job list', stop it with 'ray job stop ID'",
        )  # fmt: skip
    finally:
        lock.release()


def _check(check: list[str], prog: str, stdout: int | None) -> int:
    """Runs the job's own check of the flags (``check``), its output to ``stdout`` (None:
    this process's), its errors and warnings on stderr under this command's name ``prog``;
    returns its exit status."""
    done = subprocess.run(check, stdout=stdout, stderr=subprocess.PIPE, text=True)
    for line in done.stderr.splitlines():
        print(prog + line[len(TRAIN_PROG) :] if line.startswith(TRAIN_PROG + ":") else line,
              file=sys.stderr)  # fmt: skip
    return done.returncode


def _async_gpus(resolved: list[str]) -> int:
    """The GPUs an asynchronous run takes on one node: the colocated DeepSpeed models'
    (the actor's, or the actor's and the reference's when they are not colocated) and the
    vLLM engines'."""
    from training.openrlhf.layout import flag_value, has_flag

    def number(flag: str, default: str) -> int:
        try:
            return int(flag_value(resolved, flag, default))
        except ValueError:
            return 0

    actor = number("--actor.num_nodes", "1") * number("--actor.num_gpus_per_node", "8")
    ref = number("--ref.num_nodes", "1") * number("--ref.num_gpus_per_node", "8")
    shared = has_flag(resolved, "--train.colocate_all") or has_flag(
        resolved, "--train.colocate_actor_ref"
    )
    engines = number("--vllm.num_engines", "1") * number("--vllm.tensor_parallel_size", "1")
    return (max(actor, ref) if shared else actor + ref) + engines


if __name__ == "__main__":
    raise SystemExit(main())
