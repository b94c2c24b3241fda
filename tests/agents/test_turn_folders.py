"""The ``command`` back end's turn folders (the teammate's system prompt for one turn):
named after the process, so a start removes what a SIGKILLed process left and nothing
a live one still uses. The SIGKILL itself: tests/e2e/test_flagships.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from nanoslack.agents import CommandAgent
from nanoslack.agents.command import sweep_turn_folders
from nanoslack.agents.local import LocalTools

from .helpers import make_turn


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process (until the system reuses it)
    return proc.pid


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "system.md").write_text("You are Dana.")
    return folder


def test_a_start_removes_the_turn_folders_of_dead_processes_of_this_host_only(tmp_path: Path) -> None:
    host = socket.gethostname()
    dead = _folder(tmp_path, f"nanoslack-turn-{host}.{_dead_pid()}-abc123_x")
    kept = [
        _folder(tmp_path, f"nanoslack-turn-{host}.{os.getpid()}-own00000"),  # this process's turn
        _folder(tmp_path, f"nanoslack-turn-{host}.{os.getppid()}-live0000"),  # a live process's
        _folder(tmp_path, f"nanoslack-turn-elsewhere.example.{_dead_pid()}-other000"),  # another host's
        _folder(tmp_path, "nanoslack-turn-k2j4x9q1"),  # an older version's name: whose, unknown
        _folder(tmp_path, "unrelated-folder"),
    ]
    assert sweep_turn_folders(tmp_path) == 1
    assert not dead.exists()
    assert all(folder.exists() for folder in kept)


async def test_a_command_turn_folder_is_named_after_this_process_and_removed_after_the_turn(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "seen"
    agent = CommandAgent(f'dirname "$NANOSLACK_SYSTEM_PROMPT_FILE" > {seen}', instance="dana")
    await agent.run(make_turn(system="You are Dana."), LocalTools())
    assert_named_and_gone(Path(seen.read_text().strip()))


def assert_named_and_gone(folder: Path) -> None:
    assert folder.name.startswith(f"nanoslack-turn-{socket.gethostname()}.{os.getpid()}-")
    assert not folder.exists()
