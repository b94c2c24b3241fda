"""The README's quick start leaves nanoslack at hand (docs/operations.md): every command it
prints runs as printed in a fresh shell, one whose PATH knows nothing of .venv."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from nanoslack.cli import COMMANDS
from tests.ops.conftest import REPO, clean_env

README = (REPO / "README.md").read_text(encoding="utf-8")


def _fresh_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    venv = str(REPO / ".venv" / "bin")
    env = clean_env({"PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv)})
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_every_script_the_readme_prints_exists_and_every_nanoslack_command_it_names_is_one() -> None:
    scripts = set(re.findall(r"(?<![\w/])scripts/([\w.-]+)", README))
    assert {"demo", "test", "nanoslack"} <= scripts
    for name in scripts:
        assert os.access(REPO / "scripts" / name, os.X_OK), name
    named = re.findall(r"scripts/nanoslack (--help|[a-z-]+)", README)
    assert named and all(command in {*COMMANDS, "--help"} for command in named), named
    # What follows the quick start is typed as printed: no bare `nanoslack run` to fail there.
    running = README[README.index("## Running a fleet") : README.index("## What it guarantees")]
    assert not re.search(r"(?<![/\w])`nanoslack (manifest|doctor|run|open-room)", running), running


def test_scripts_nanoslack_runs_in_a_fresh_shell_on_the_env_file_of_the_directory_it_is_in(
    tmp_path: Path,
) -> None:
    shell = _fresh_shell("command -v nanoslack || echo none", tmp_path)
    assert shell.stdout.strip() == "none"  # the venv is not on this shell's PATH
    helped = _fresh_shell(f"{REPO}/scripts/nanoslack --help", tmp_path)
    assert helped.returncode == 0 and "doctor" in helped.stdout, helped.stderr
    (tmp_path / ".env").write_text("SLACK_INSTANCES=dana,eli\n")
    refused = _fresh_shell(f"{REPO}/scripts/nanoslack memory nobody --db {tmp_path / 'none.db'}", tmp_path)
    assert refused.returncode == 2
    assert "the configured ones: dana, eli" in refused.stderr  # ./.env of tmp_path, not the repo's
