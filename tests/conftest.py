import sys
from pathlib import Path

# Test modules import helpers that live in tests/ (sample_data.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
