"""``gigpo-export RUN_DIR OUT_DIR`` (``python -m training.cli.export``): a training run's
policy as a plain Hugging Face model directory: its newest checkpoint's weights, or under
LoRA the base with the adapters merged in (W + alpha / r * B @ A), for vLLM, serving, or
OpenRLHF (:func:`training.local.trained.export_run`). A LoRA run's adapters alone are
already in PEFT's format in ``RUN_DIR/checkpoint/adapter/``. The run folder is data: its
base model runs its own code (``auto_map``) only with ``--model.trust_remote_code=true``
here, never because the run's ``config.json`` says so."""

from __future__ import annotations

import argparse
import json
import sys

from training.commands import CommandParser, interrupted, invoked_as
from training.local.schema import DTYPES


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog=invoked_as("training.cli.export"),
        description="Write a gigpo-train run's policy (LoRA adapters merged) as a Hugging "
        "Face model directory.",
    )
    parser.add_argument("run_dir", help="a gigpo-train run (its --out folder)")
    parser.add_argument("out_dir", help="the model directory to write (must not exist)")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                        help="the weights' dtype (default bfloat16)")  # fmt: skip
    parser.add_argument(
        "--model.trust_remote_code", dest="trust_remote_code", default=False,
        type=_true_or_false, metavar="true|false",
        help="run the base model's own Python code (its config.json's auto_map), as the "
        "trainer's setting does; the run's config.json never turns it on (default false)",
    )  # fmt: skip
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from training.folders import FolderKindError
    from training.local.config import ConfigError
    from training.local.trained import export_run

    try:
        record = export_run(args.run_dir, args.out_dir, args.dtype,
                            trust_remote_code=args.trust_remote_code)  # fmt: skip
    except (ConfigError, FolderKindError, OSError, RuntimeError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(
            parser.prog, f"{args.out_dir} was not written; run the same command again"
        )
    print(json.dumps(record))
    print(f"wrote {args.out_dir}: load it with AutoModelForCausalLM.from_pretrained or vLLM")
    return 0


def _true_or_false(text: str) -> bool:
    """``true`` or ``false`` (any case), as a config's YAML spells a flag."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


if __name__ == "__main__":
    sys.exit(main())
