"""``nanoslack memory`` (docs/memory.md): operators list, add and forget agents' notes."""

from __future__ import annotations

import io
from pathlib import Path

from nanoslack.ops.memory import main
from nanoslack.store import Store


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
