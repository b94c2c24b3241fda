#!/usr/bin/env python3
"""Run one SQL statement against the nanoslack store (DESIGN §4): see `scripts/q.py --help`.

Standard library only, so any python3 runs it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nanoslack.ops.q import main  # noqa: E402 - needs the repo root on sys.path first

if __name__ == "__main__":
    sys.exit(main())
