"""``python -m training.study``: runs :func:`training.cli.study.main` (an entry point: nothing
imports this module)."""

from __future__ import annotations

import sys

from training.cli.study import main

if __name__ == "__main__":
    sys.exit(main())
