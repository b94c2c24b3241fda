"""Reading ``routines.toml`` (docs/routines.md): schedules, and what is malformed, named."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from nanoslack.config.values import time_zone
from nanoslack.routines.spec import Cron, Every, parse

NOW = dt.datetime(2026, 12, 1, 12, 0, 30, tzinfo=dt.UTC).timestamp()


def _parse(text: str, tmp_path: Path, **kw: object) -> tuple[list[str], list[str]]:
    path = tmp_path / "dana" / "routines.toml"
    path.parent.mkdir(exist_ok=True)
    result = parse(text, path, "dana", now=NOW, **kw)  # type: ignore[arg-type]
    return [r.name for r in result.routines], [f"{p.line}:{p.routine}:{p.what}" for p in result.problems]


def test_every_due_times_lie_on_a_grid_every_process_computes_alike() -> None:
    every = Every(120, "2m")
    assert every.next_after(NOW) == dt.datetime(2026, 12, 1, 12, 2, tzinfo=dt.UTC).timestamp()
    assert every.next_after(every.next_after(NOW)) - every.next_after(NOW) == 120


def test_cron_is_read_in_nanoslack_tz() -> None:
    tz, problem = time_zone("Europe/Paris")
    assert problem is None and tz == ZoneInfo("Europe/Paris")
    nine_paris = Cron("0 9 * * *", tz).next_after(NOW)
    assert dt.datetime.fromtimestamp(nine_paris, dt.UTC).hour == 8  # 09:00 CET is 08:00 UTC
    assert time_zone("Mars/Olympus")[1] is not None


def test_a_good_file_gives_its_routines(tmp_path: Path) -> None:
    text = """
[[routine]]
name = "daily-plan"
cron = "0 9 * * 1-5"
prompt = "Plan the day."

[[routine]]
name = "heartbeat"
every = "30m"
channel = "C0ROOM"
prompt = "Anything on fire?"
max_steps = 3
daily_tokens = 5000
"""
    assert _parse(text, tmp_path) == (["daily-plan", "heartbeat"], [])


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ('every = "0s"', "below 1 s"),
        ('every = "5x"', "is not <n>s"),
        ('cron = "0 0 30 2 *"', "never fires"),
        ('cron = "* * *"', "five fields"),
        ('every = "1m"\ncron = "* * * * *"', "one of every or cron"),
        ('every = "1m"\nchannel = "general"', "unknown channel"),
        ('every = "1m"\nmax_steps = 99', "above NANOSLACK_MAX_STEPS"),
        ('every = "1m"\ngate = "./missing.sh"', "does not exist"),
        ('every = "1m"\ncolour = "red"', "unknown key"),
    ],
)
def test_a_bad_routine_is_a_problem_naming_it_and_the_others_still_run(
    tmp_path: Path, body: str, what: str
) -> None:
    good = '[[routine]]\nname = "good"\nevery = "1h"\nprompt = "p"\n\n'
    text = good + f'[[routine]]\nname = "bad"\nprompt = "p"\n{body}\n'
    names, problems = _parse(text, tmp_path, max_steps=12)
    assert names == ["good"]
    assert len(problems) == 1 and problems[0].startswith("6:bad:") and what in problems[0], problems


def test_a_gate_that_is_not_executable_is_named(tmp_path: Path) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "check.sh").write_text("exit 0\n")
    _, problems = _parse(
        '[[routine]]\nname = "x"\nevery = "1m"\nprompt = "p"\ngate = "./check.sh"\n', tmp_path
    )
    assert problems and "not executable" in problems[0]


def test_a_file_that_is_not_toml_is_one_problem_with_its_line(tmp_path: Path) -> None:
    names, problems = _parse('[[routine]]\nname = "x"\nevery = \n', tmp_path)
    assert names == [] and len(problems) == 1 and problems[0].startswith("3::not TOML")


def test_two_routines_with_one_name_keep_the_first(tmp_path: Path) -> None:
    one = '[[routine]]\nname = "x"\nevery = "1m"\nprompt = "p"\n'
    names, problems = _parse(one + one, tmp_path)
    assert names == ["x"] and "second routine" in problems[0]
