"""The keys of agents with tools (docs/configuration.md, docs/agents.md): read once, a bad
value named and skipped."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from nanoslack.config import load_settings


def _tools(tmp_path: Path, **env: str):  # type: ignore[no-untyped-def]
    return load_settings(tmp_path / ".env", {"SLACK_INSTANCES": "dana,eli", **env}).tools


def test_defaults_follow_the_design(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    assert (tools.max_steps("dana"), tools.tool_timeout, tools.approval_timeout) == (12, 60.0, 300.0)
    assert (tools.allow, tools.chief, tools.allow_broadcast, tools.working_reaction) == (
        frozenset(),
        None,
        False,
        "eyes",
    )


def test_the_allowlist_is_directed_and_the_chief_is_exempt_both_ways_but_never_to_itself(
    tmp_path: Path,
) -> None:
    tools = _tools(tmp_path, NANOSLACK_A2A_ALLOW="dana>eli, Eli > Fay", NANOSLACK_CHIEF="gus")
    assert tools.may_hand_off("dana", "eli") and tools.may_hand_off("eli", "fay")
    assert not tools.may_hand_off("eli", "dana")
    assert tools.may_hand_off("fay", "gus") and tools.may_hand_off("gus", "dana")
    assert not tools.may_hand_off("gus", "gus") and not tools.may_hand_off("dana", "dana")


def test_a_malformed_pair_is_skipped_with_a_warning_naming_the_key(tmp_path: Path) -> None:
    with capture_logs() as logs:
        tools = _tools(tmp_path, NANOSLACK_A2A_ALLOW="dana>eli,eli,>fay")
    assert tools.allow == frozenset({("dana", "eli")})
    assert [e["key"] for e in logs if e.get("key", "").startswith("NANOSLACK")] == ["NANOSLACK_A2A_ALLOW"] * 2


def test_steps_are_per_instance_first_and_bad_numbers_fall_back_with_a_warning(tmp_path: Path) -> None:
    with capture_logs() as logs:
        tools = _tools(
            tmp_path, NANOSLACK_MAX_STEPS="5", NANOSLACK_MAX_STEPS_ELI="3", NANOSLACK_TOOL_TIMEOUT="soon"
        )
    assert (tools.max_steps("dana"), tools.max_steps("eli"), tools.tool_timeout) == (5, 3, 60.0)
    assert any(e.get("key") == "NANOSLACK_TOOL_TIMEOUT" for e in logs)


def test_broadcast_and_the_reaction_can_be_switched(tmp_path: Path) -> None:
    tools = _tools(tmp_path, NANOSLACK_ALLOW_BROADCAST="1", NANOSLACK_WORKING_REACTION=":hourglass:")
    assert tools.allow_broadcast and tools.working_reaction == "hourglass"
    assert _tools(tmp_path, NANOSLACK_WORKING_REACTION="").working_reaction == ""


def test_the_teammates_an_instance_may_reach_are_its_siblings_or_what_the_allowlist_lets_it(
    tmp_path: Path,
) -> None:
    assert _tools(tmp_path).teammates_of("dana") == ("eli",)  # no allowlist: every sibling
    tools = _tools(tmp_path, NANOSLACK_A2A_ALLOW="dana>fay", NANOSLACK_CHIEF="gus")
    # fay and gus run in another process: named by the allowlist and the chief.
    assert tools.teammates_of("dana") == ("fay", "gus")
    assert tools.teammates_of("eli") == ("gus",)
    assert tools.teammates_of("gus") == ("dana", "eli", "fay")
