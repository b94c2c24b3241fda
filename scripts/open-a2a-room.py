#!/usr/bin/env python3
"""Open an A2A room (DESIGN §6): see `scripts/open-a2a-room.py --help`."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    from nanoslack.ops.open_room import main
except ModuleNotFoundError as e:
    # Run with a python3 that lacks the dependencies: hand over to the checkout's venv.
    venv = ROOT / ".venv"
    venv_python = venv / "bin" / "python"
    # Compare prefixes, not executables: the venv's python is a symlink to the system one.
    if venv_python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(venv_python), [str(venv_python), str(Path(__file__).resolve()), *sys.argv[1:]])
    print(
        f"open-a2a-room: missing dependency {e.name!r}; run scripts/test once to create .venv, "
        "or use .venv/bin/python scripts/open-a2a-room.py",
        file=sys.stderr,
    )
    sys.exit(1)

if __name__ == "__main__":
    sys.exit(main())
