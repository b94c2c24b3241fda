"""``nanoslack spend``'s routine rows: each beside its ``daily_tokens`` cap, read from the
routine's file in the teammates folder the fleet uses (``run``'s rule: ``NANOSLACK_TEAMMATES``
relative to the ``.env``'s folder), whatever folder the command runs from."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nanoslack.ops import spend as spend_cli
from nanoslack.store import Store

ROUTINE = '[[routine]]\nname = "plan"\nevery = "24h"\nchannel = "C1"\nprompt = "Plan."\ndaily_tokens = 5000\n'


def _routine_turn(db: Path, tokens: int) -> None:
    """One routine run of dana's ``plan`` whose turn spent ``tokens``."""
    store = Store.open(f"sqlite:///{db}")
    try:
        turn = store.turns.start(
            instance="dana",
            channel="C1",
            thread_key="C1",
            reply_thread_ts="",
            sender_id="routine",
            through_ts="1.0",
            messages=1,
            wrapping_up=False,
        )
        store.turns.add_tokens(turn, tokens)
        run = store.routines.claim("dana", "plan", 1.0, "running")
        assert run is not None
        store.routines.set_turn(run, turn)
    finally:
        store.close()


def test_spend_shows_a_routines_token_cap_from_the_teammates_folder_beside_the_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    (conf / "crew" / "dana").mkdir(parents=True)
    (conf / "crew" / "dana" / "routines.toml").write_text(ROUTINE)
    (conf / ".env").write_text("SLACK_INSTANCES=dana\nNANOSLACK_TEAMMATES=crew\n")
    db = tmp_path / "spend.db"
    _routine_turn(db, 1200)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a folder with no teammates: the .env's folder is what counts
    monkeypatch.delenv("NANOSLACK_TEAMMATES", raising=False)

    out = io.StringIO()
    assert spend_cli.main(["--db", str(db), "--env-file", str(conf / ".env")], out=out) == 0
    (row,) = [line.split() for line in out.getvalue().splitlines() if line.startswith("dana/plan")]
    # routine, turns, tokens, token cap, dollars, unpriced calls
    assert row == ["dana/plan", "1", "1200", "5000", "$0.0000", "0"], out.getvalue()
