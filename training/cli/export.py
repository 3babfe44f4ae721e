"""``gigpo-export RUN_DIR OUT_DIR`` (``python -m training.cli.export``): a training run's
policy as a plain Hugging Face model directory: its newest checkpoint's weights, or under
LoRA the base with the adapters merged in (W + alpha / r * B @ A), for vLLM, serving, or
OpenRLHF (:func:`training.local.trained.export_run`). A LoRA run's adapters alone are
already in PEFT's format in ``RUN_DIR/checkpoint/adapter/``."""

from __future__ import annotations

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
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from training.folders import FolderKindError
    from training.local.config import ConfigError
    from training.local.trained import export_run

    try:
        record = export_run(args.run_dir, args.out_dir, args.dtype)
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


if __name__ == "__main__":
    sys.exit(main())
