"""OpenRLHF 0.11.2's own checks of a command, run by the dry run before anything starts.

``openrlhf.cli.train_ppo_ray`` parses its flags and checks them (its assertions on batch
sizes, estimators, modes) in its ``__main__`` block, then calls ``train(args)``, whose first
act is to start Ray. :func:`openrlhf_checks` runs that block as it is, on the resolved
command, and stops it where ``train`` would start Ray (``ray.is_initialized`` is the first
call ``train`` makes): a command OpenRLHF would refuse inside the Ray job is refused by the
dry run, with OpenRLHF's own message. It needs OpenRLHF and what its entry module imports
(vLLM; on ``--gigpo.device cpu`` the CPU's stand-ins for flash-attn are put in place first);
where they are not installed the checks are not run, and the dry run says so.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import sys

#: OpenRLHF's entry module, whose ``__main__`` block holds the checks.
ENTRY = "openrlhf.cli.train_ppo_ray"
#: What the entry module imports that may be missing where OpenRLHF itself is installed.
NEEDED = ("openrlhf", "ray", "deepspeed", "vllm", "flash_attn")


class OpenRLHFRefused(ValueError):
    """OpenRLHF's parser or its checks refused the command (the message is OpenRLHF's)."""


class _ReachedTrain(Exception):
    """Raised where ``train(args)`` would start Ray: every check passed."""


def openrlhf_checks(openrlhf_args: list[str]) -> list[str]:
    """Runs OpenRLHF's parser and checks on ``openrlhf_args``.

    Returns:
        The lines OpenRLHF printed while checking (its warnings), empty when none.

    Raises:
        ImportError: OpenRLHF, or a module its entry module imports, is not installed.
        OpenRLHFRefused: its parser or a check refused the command (its message).
    """
    import importlib
    import importlib.util

    for name in NEEDED:  # a cheap look first: importing OpenRLHF takes seconds
        if importlib.util.find_spec(name) is None:
            raise ImportError(f"No module named {name!r}")
    importlib.import_module("openrlhf.trainer.ray")  # an ImportError before anything runs
    import ray

    def stop(*args: object, **kwargs: object) -> bool:
        raise _ReachedTrain

    saved = (ray.is_initialized, sys.argv)
    out, err = io.StringIO(), io.StringIO()
    ray.is_initialized, sys.argv = stop, [ENTRY, *openrlhf_args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_module(ENTRY, run_name="__main__")
    except _ReachedTrain:
        return [line for line in out.getvalue().splitlines() if line.strip()]
    except SystemExit as exc:  # argparse: the usage and its error on stderr
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise OpenRLHFRefused(lines[-1] if lines else f"its parser exited ({exc.code})") from None
    except AssertionError as exc:
        raise OpenRLHFRefused(str(exc) or "an assertion failed") from None
    finally:
        ray.is_initialized, sys.argv = saved
    raise OpenRLHFRefused(f"{ENTRY} returned without reaching train()")
