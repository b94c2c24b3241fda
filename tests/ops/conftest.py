from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from nanoslack.emulator import ThreadedEmulator
from tests.conftest import PROXY_KEYS
from tests.ops.rooms import HUMAN_NAME, Room

REPO = Path(__file__).resolve().parents[2]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a script under test: no proxies and no Slack/nanoslack keys
    leaking in from the developer's shell, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in PROXY_KEYS and not k.startswith(("SLACK_", "NANOSLACK_"))
    }
    env.update(extra or {})
    return env


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def run_script(
    script: str,
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    python: Sequence[str] = (sys.executable,),
) -> Run:
    r = subprocess.run(
        [*python, str(REPO / "scripts" / script), *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(r.returncode, r.stdout, r.stderr)


@pytest.fixture
def run() -> Callable[..., Run]:
    """``run("q.py", arg, …, cwd=…, env=…)``: the script as a real subprocess."""
    return run_script


@pytest.fixture
def room(tmp_path: Path, run: Callable[..., Run], temu: ThreadedEmulator) -> Room:
    """alice, dana, eli and fay in the emulator; ``room.open(...)`` runs open-a2a-room.py."""
    human = temu.add_user(HUMAN_NAME)
    apps = {name: temu.add_app(name) for name in ("dana", "eli", "fay")}
    return Room(emu=temu, human=human, apps=apps, tmp=tmp_path, run=run)
