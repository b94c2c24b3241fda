"""Editing an operator's .env without disturbing anything else: SLACK_A2A_ROOMS's list
(``append_to_list``) and whole values (``write_env``, the one .env writer)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from dotenv import dotenv_values
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoslack.config import read_env_file
from nanoslack.ops.envfile import append_to_list, write_env

KEY = "SLACK_A2A_ROOMS"


def edit(tmp_path: Path, before: bytes, item: str = "C2") -> tuple[bool, bytes]:
    path = tmp_path / ".env"
    path.write_bytes(before)
    changed = append_to_list(path, KEY, item)
    return changed, path.read_bytes()


def test_creates_a_missing_file_with_only_the_key(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    assert append_to_list(path, KEY, "C1") is True
    assert path.read_bytes() == b"SLACK_A2A_ROOMS=C1\n"
    # It will sit next to tokens: owner-only.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_appends_the_line_when_the_key_is_absent_and_keeps_other_bytes(tmp_path: Path) -> None:
    before = b"# tokens\nSLACK_BOT_TOKEN=xoxb-1  # main\n\nOTHER='a,b'\n"
    assert edit(tmp_path, before) == (True, before + b"SLACK_A2A_ROOMS=C2\n")


def test_adds_a_newline_before_appending_to_a_file_without_one(tmp_path: Path) -> None:
    assert edit(tmp_path, b"A=1") == (True, b"A=1\nSLACK_A2A_ROOMS=C2\n")


def test_keeps_crlf_line_endings(tmp_path: Path) -> None:
    assert edit(tmp_path, b"A=1\r\n") == (True, b"A=1\r\nSLACK_A2A_ROOMS=C2\r\n")
    assert edit(tmp_path, b"SLACK_A2A_ROOMS=C1\r\nB=2\r\n") == (True, b"SLACK_A2A_ROOMS=C1,C2\r\nB=2\r\n")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"SLACK_A2A_ROOMS=C1", b"SLACK_A2A_ROOMS=C1,C2"),
        (b"SLACK_A2A_ROOMS=", b"SLACK_A2A_ROOMS=C2"),
        (b'SLACK_A2A_ROOMS=""', b'SLACK_A2A_ROOMS="C2"'),
        (b'SLACK_A2A_ROOMS="C1"', b'SLACK_A2A_ROOMS="C1,C2"'),
        (b"SLACK_A2A_ROOMS='C1, G1'", b"SLACK_A2A_ROOMS='C1, G1,C2'"),
        (b"export SLACK_A2A_ROOMS = C1", b"export SLACK_A2A_ROOMS = C1,C2"),
        (b"SLACK_A2A_ROOMS=C1,", b"SLACK_A2A_ROOMS=C1,C2"),
        (b"SLACK_A2A_ROOMS=C1  # rooms", b"SLACK_A2A_ROOMS=C1,C2  # rooms"),
        (b'SLACK_A2A_ROOMS="C1" # rooms', b'SLACK_A2A_ROOMS="C1,C2" # rooms'),
    ],
)
def test_extends_the_existing_line_in_its_own_quoting_style(
    tmp_path: Path, line: bytes, expected: bytes
) -> None:
    changed, after = edit(tmp_path, b"A=1\n" + line + b"\nB=2\n")
    assert changed
    assert after == b"A=1\n" + expected + b"\nB=2\n"
    assert dotenv_values(tmp_path / ".env")[KEY] is not None
    assert "C2" in [x.strip() for x in (dotenv_values(tmp_path / ".env")[KEY] or "").split(",")]


@pytest.mark.parametrize(
    "line", [b"SLACK_A2A_ROOMS=C2", b"SLACK_A2A_ROOMS='C1, C2 ,G3'", b'SLACK_A2A_ROOMS="C2"']
)
def test_an_id_already_listed_leaves_the_file_unchanged(tmp_path: Path, line: bytes) -> None:
    before = b"A=1\n" + line + b"\n"
    path = tmp_path / ".env"
    path.write_bytes(before)
    mtime = path.stat().st_mtime_ns
    assert append_to_list(path, KEY, "C2") is False
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime


def test_a_prefix_of_a_listed_id_is_still_added(tmp_path: Path) -> None:
    # Exact match: C2 is not C22.
    assert edit(tmp_path, b"SLACK_A2A_ROOMS=C22\n") == (True, b"SLACK_A2A_ROOMS=C22,C2\n")


def test_edits_the_last_occurrence_which_is_the_one_dotenv_reads(tmp_path: Path) -> None:
    before = b"SLACK_A2A_ROOMS=C0\nSLACK_A2A_ROOMS=C1\n"
    assert edit(tmp_path, before) == (True, b"SLACK_A2A_ROOMS=C0\nSLACK_A2A_ROOMS=C1,C2\n")


def test_ignores_commented_out_and_similarly_named_keys(tmp_path: Path) -> None:
    before = b"# SLACK_A2A_ROOMS=C9\nSLACK_A2A_ROOMS_OLD=C8\nXSLACK_A2A_ROOMS=C7\n"
    assert edit(tmp_path, before) == (True, before + b"SLACK_A2A_ROOMS=C2\n")


def test_bytes_that_are_not_utf8_survive_untouched(tmp_path: Path) -> None:
    before = b"NAME=caf\xe9\nSLACK_A2A_ROOMS=C1\n"
    assert edit(tmp_path, before) == (True, b"NAME=caf\xe9\nSLACK_A2A_ROOMS=C1,C2\n")


def test_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b"A=1\n")
    os.chmod(path, 0o640)
    append_to_list(path, KEY, "C2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_edits_through_a_symlink_instead_of_replacing_it(tmp_path: Path) -> None:
    real = tmp_path / "real.env"
    real.write_bytes(b"A=1\n")
    link = tmp_path / ".env"
    link.symlink_to(real)
    append_to_list(link, KEY, "C2")
    assert link.is_symlink()
    assert real.read_bytes() == b"A=1\nSLACK_A2A_ROOMS=C2\n"


def test_leaves_no_temporary_files_behind(tmp_path: Path) -> None:
    edit(tmp_path, b"A=1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env"]


@pytest.mark.parametrize("item", ["", "C1,C2", "C1\nEVIL=1", "C1#"])
def test_refuses_items_that_would_corrupt_the_file(tmp_path: Path, item: str) -> None:
    with pytest.raises(ValueError):
        append_to_list(tmp_path / ".env", KEY, item)


# -- write_env ----------------------------------------------------------------------------------


def test_write_env_sets_keys_in_place_and_keeps_every_other_line(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b"# tokens\nexport A = 1  # first\nB='old'\nNAME=caf\xe9\nA=2\n")
    write_env(path, {"A": "3", "C": "new"})
    assert path.read_bytes() == b"# tokens\nexport A = 1  # first\nB='old'\nNAME=caf\xe9\nA=3\nC=new\n"
    write_env(path, {"B": "x y"})
    assert b"\nB='x y'\n" in path.read_bytes()


def test_write_env_keeps_the_comment_after_a_quoted_value_with_an_escaped_quote(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b"A='it\\'s' # why\n")
    write_env(path, {"A": "plain"})
    assert path.read_bytes() == b"A=plain # why\n"


def test_write_env_with_replace_holds_exactly_the_values_and_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    write_env(path, {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_A2A_ROOMS": "C1,G2"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_env(path, {"A": "1"}, replace=True)
    assert path.read_bytes() == b"A=1\n"


@pytest.mark.parametrize("value", ["two\nlines", "a${HOME}b", "\r"])
def test_write_env_refuses_a_value_dotenv_would_not_read_back(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError):
        write_env(tmp_path / ".env", {"A": value})
    assert not (tmp_path / ".env").exists()


_VALUES = st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",))).filter(
    lambda v: "${" not in v
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), _VALUES, max_size=6))
def test_write_env_values_read_back_exactly_with_python_dotenv(
    tmp_path_factory: pytest.TempPathFactory, values: dict[str, str]
) -> None:
    path = tmp_path_factory.mktemp("env") / ".env"
    path.write_text("KEEP='me' # a comment\nOTHER=1\n")
    write_env(path, values)
    assert read_env_file(path) == {"KEEP": "me", "OTHER": "1", **values}
