"""``nanoslack routines`` (docs/routines.md) as an operator runs it: a routines.toml the fleet
cannot use is said, with its place and its fix, instead of an empty listing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nanoslack.store import Store
from tests.ops.conftest import clean_env


def _routines(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nanoslack", "routines"],
        cwd=home,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _fleet_home(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text(
        "SLACK_INSTANCES=dana,eli\nNANOSLACK_DB=data/nanoslack.db\nNANOSLACK_TEAMMATES=teammates\n"
    )
    (tmp_path / "data").mkdir()
    Store.open(f"sqlite:///{tmp_path / 'data' / 'nanoslack.db'}").close()
    for name in ("dana", "eli"):
        (tmp_path / "teammates" / name).mkdir(parents=True)
    return tmp_path


def test_routines_says_a_routines_file_does_not_parse_with_its_place_and_fix(tmp_path: Path) -> None:
    home = _fleet_home(tmp_path)
    (home / "teammates" / "dana" / "routines.toml").write_text('[[routine]]\nname = "plan\nevery = "1h"\n')
    (home / "teammates" / "eli" / "routines.toml").write_text(
        '[[routine]]\nname = "check"\nevery = "0s"\nprompt = "p"\n'
    )
    r = _routines(home)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the fleet lists them once" not in r.stdout
    assert "routines malformed" in r.stdout
    [dana] = [line for line in r.stdout.splitlines() if line.strip().startswith("dana:")]
    assert "routines.toml:2: not TOML" in dana and "fix: correct the TOML" in dana, dana
    [eli] = [line for line in r.stdout.splitlines() if line.strip().startswith("eli:")]
    assert "check: every '0s' is below 1 s" in eli and "fix: write every as" in eli, eli


def test_routines_with_good_files_lists_as_before(tmp_path: Path) -> None:
    home = _fleet_home(tmp_path)
    (home / "teammates" / "dana" / "routines.toml").write_text(
        '[[routine]]\nname = "plan"\nevery = "1h"\nprompt = "p"\n'
    )
    r = _routines(home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no routines (the fleet lists them once it has read" in r.stdout
