import sys
from pathlib import Path

# The naive per-row reference lives with the benchmarks; the tests use it as an oracle.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
