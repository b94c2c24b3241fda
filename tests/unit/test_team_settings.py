"""The keys of team rooms (docs/configuration.md, docs/team-rooms.md): a vote's reminder and
close, read once at start."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from nanoslack.config import load_settings
from nanoslack.config.team import TeamSettings


def _team(tmp_path: Path, **env: str) -> TeamSettings:
    return load_settings(tmp_path / ".env", {"SLACK_INSTANCES": "dana", **env}).tools.team


def test_a_vote_reminds_after_a_minute_and_closes_two_minutes_later_by_default(tmp_path: Path) -> None:
    team = _team(tmp_path)
    assert (team.vote_remind, team.vote_close) == (60.0, 120.0)
    assert (team.task_ping, team.task_stale) == (30 * 60.0, 2 * 3600.0)


def test_vote_timings_take_seconds_and_a_bad_value_falls_back_with_a_warning(tmp_path: Path) -> None:
    assert _team(tmp_path, NANOSLACK_VOTE_REMIND="2.5", NANOSLACK_VOTE_CLOSE="30").vote_close == 30.0
    with capture_logs() as logs:
        team = _team(tmp_path, NANOSLACK_VOTE_REMIND="soon", NANOSLACK_VOTE_CLOSE="-1")
    assert (team.vote_remind, team.vote_close) == (60.0, 120.0)
    assert [e["key"] for e in logs if e.get("key", "").startswith("NANOSLACK_VOTE")] == [
        "NANOSLACK_VOTE_REMIND",
        "NANOSLACK_VOTE_CLOSE",
    ]
