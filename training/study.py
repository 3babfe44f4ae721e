"""``python -m training.study``: the estimator study (see :mod:`training.cli.study`)."""

from __future__ import annotations

import sys

from training.cli.study import main

if __name__ == "__main__":
    sys.exit(main())
