"""``nanoslack memory`` (docs/memory.md): operators list, add and forget agents' notes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nanoslack.ops.memory import main
from nanoslack.store import Store


@pytest.fixture(autouse=True)
def _fleet_of_dana_and_eli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("SLACK_INSTANCES", "dana,eli")


def _memory(db: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([*argv, "--db", str(db)], out=out)
    return code, out.getvalue()


def test_an_operator_adds_lists_and_forgets_notes(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    Store.open(f"sqlite:///{db}").close()
    assert _memory(db, "add", "dana", "deploys are on Thursday") == (0, "added m1 (self note of dana)\n")
    assert _memory(db, "add", "eli", "staging is blue-7", "--scope", "room", "--room", "C1")[0] == 0
    code, listed = _memory(db, "dana")
    assert code == 0 and "deploys are on Thursday" in listed and "blue-7" not in listed
    code, room = _memory(db, "--room", "C1")
    assert "blue-7" in room and "Thursday" not in room
    assert _memory(db, "forget", "m1") == (0, "forgot m1\n")
    assert "Thursday" not in _memory(db)[1]


def test_bad_input_to_memory_changes_nothing(tmp_path: Path, capsys: object) -> None:
    db = tmp_path / "n.db"
    Store.open(f"sqlite:///{db}").close()
    assert _memory(db, "add", "dana", "   ")[0] == 2
    assert _memory(db, "add", "dana", "x" * 501)[0] == 2
    assert _memory(db, "add", "dana", "a room note", "--scope", "room")[0] == 2
    assert _memory(db, "forget", "zebra")[0] == 2
    assert _memory(db, "forget", "m99")[0] == 1
    assert _memory(db) == (0, "no notes\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "nobody", "--db", "DB"],
        ["memory", "add", "nobody", "a note", "--db", "DB"],
        ["routines", "--db", "DB", "history", "nobody", "plan"],
        ["routines", "--db", "DB", "run", "nobody", "plan"],
        ["routines", "--db", "DB", "pause", "nobody", "plan"],
        ["senders", "--db", "DB", "approve", "nobody", "slack:U0SOMEONE"],
        ["turns", "--db", "DB", "--instance", "nobody"],
    ],
)
def test_a_command_given_an_instance_not_configured_fails_listing_the_configured_ones(
    tmp_path: Path, argv: list[str]
) -> None:
    import subprocess
    import sys

    from tests.ops.conftest import clean_env

    db = tmp_path / "n.db"
    Store.open(f"sqlite:///{db}").close()
    (tmp_path / ".env").write_text("SLACK_INSTANCES=dana,eli\n")
    r = subprocess.run(
        [sys.executable, "-m", "nanoslack", *(str(db) if a == "DB" else a for a in argv)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no instance 'nobody' is configured; the configured ones: dana, eli" in r.stderr
    assert "no notes" not in r.stdout and "no runs" not in r.stdout
    with Store.open(f"sqlite:///{db}") as store:
        assert store.memories.all() == []
