"""The fleet bot's Slack app manifest (docs/operations.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nanoslack.ops.manifest import PLACEHOLDER_NAME, dumps, main, render_manifest
from tests.ops.conftest import clean_env

REPO = Path(__file__).resolve().parents[2]

SCOPES = (
    "chat:write mpim:write mpim:read mpim:history im:write im:read im:history "
    "channels:history groups:history app_mentions:read users:read reactions:read reactions:write"
    " metadata.message:read assistant:write files:read files:write"
).split()
EVENTS = (
    "message.mpim message.im message.channels message.groups app_mention reaction_added"
    " assistant_thread_started assistant_thread_context_changed"
    " app_home_opened app_context_changed agent_session_stopped"
).split()


def test_socket_mode_and_interactivity_are_on_with_no_request_urls() -> None:
    m = render_manifest("dana")
    assert m["settings"]["socket_mode_enabled"] is True
    assert m["settings"]["interactivity"]["is_enabled"] is True
    assert "request_url" not in json.dumps(m)


def test_has_exactly_the_scopes_and_bot_events_of_the_design() -> None:
    m = render_manifest("dana")
    assert sorted(m["oauth_config"]["scopes"]["bot"]) == sorted(SCOPES)
    assert len(m["oauth_config"]["scopes"]["bot"]) == len(SCOPES)
    assert sorted(m["settings"]["event_subscriptions"]["bot_events"]) == sorted(EVENTS)
    assert len(m["settings"]["event_subscriptions"]["bot_events"]) == len(EVENTS)


def test_the_app_is_an_agent_with_the_home_tab_on_and_no_assistant_view() -> None:
    m = render_manifest("dana")
    # Slack's migration guide: switch assistant_view for agent_view, whose description is
    # agent_description; the DM is the Messages tab, the owner's Home the Home tab.
    assert m["features"]["agent_view"] == {"agent_description": "nanoslack teammate 'dana'"}
    assert "assistant_view" not in m["features"]
    assert m["features"]["app_home"]["home_tab_enabled"] is True
    assert m["features"]["app_home"]["messages_tab_enabled"] is True
    assert "assistant:write" in m["oauth_config"]["scopes"]["bot"]
    events = m["settings"]["event_subscriptions"]["bot_events"]
    assert {"app_home_opened", "app_context_changed", "agent_session_stopped"} <= set(events)


def test_the_agent_description_is_the_teammates_description_else_its_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dana").mkdir()
    (tmp_path / "dana" / "SOUL.md").write_text(
        "---\nrole: planner\ndescription: Plans the week\n---\nDana.\n"
    )
    (tmp_path / "eli").mkdir()
    (tmp_path / "eli" / "SOUL.md").write_text("---\nrole: engineer\n---\nEli.\n")
    for name, described in (
        ("dana", "Plans the week"),
        ("eli", "engineer"),
        ("fay", "nanoslack teammate 'fay'"),
    ):
        assert main([name, "--teammates", str(tmp_path)]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["features"]["agent_view"]["agent_description"] == described


def _soul(folder: Path, name: str, description: str) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "SOUL.md").write_text(f"---\nrole: planner\ndescription: {description}\n---\nDana.\n")


def _manifest_cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "nanoslack", "manifest", "dana", *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    printed: dict[str, Any] = json.loads(r.stdout)
    return printed


def test_the_description_comes_from_the_teammates_folder_of_nanoslack_teammates(tmp_path: Path) -> None:
    # The folder run and doctor read, not ./teammates of wherever the command runs.
    _soul(tmp_path / "crew", "dana", "Plans the fleet's week")
    elsewhere = tmp_path / "elsewhere"
    _soul(elsewhere / "teammates", "dana", "the wrong dana")
    printed = _manifest_cli(elsewhere, env={"NANOSLACK_TEAMMATES": str(tmp_path / "crew")})
    assert printed["features"]["agent_view"]["agent_description"] == "Plans the fleet's week"


def test_nanoslack_teammates_in_the_env_file_is_relative_to_its_folder(tmp_path: Path) -> None:
    home = tmp_path / "fleet"
    _soul(home / "crew", "dana", "Keeps the roadmap")
    (home / ".env").write_text("NANOSLACK_TEAMMATES=crew\n")
    for cwd, args in ((home, ()), (tmp_path, ("--env-file", str(home / ".env")))):
        printed = _manifest_cli(cwd, *args)
        assert printed["features"]["agent_view"]["agent_description"] == "Keeps the roadmap", cwd


def test_the_teammates_option_wins_over_nanoslack_teammates(tmp_path: Path) -> None:
    _soul(tmp_path / "crew", "dana", "from the environment")
    _soul(tmp_path / "given", "dana", "from the option")
    env = {"NANOSLACK_TEAMMATES": str(tmp_path / "crew")}
    printed = _manifest_cli(tmp_path, "--teammates", str(tmp_path / "given"), env=env)
    assert printed["features"]["agent_view"]["agent_description"] == "from the option"


def test_instance_name_names_the_app_and_its_bot_user() -> None:
    m = render_manifest("gh-bot")
    assert m["display_information"]["name"] == "gh-bot"
    assert m["features"]["bot_user"]["display_name"] == "gh-bot"


@pytest.mark.parametrize("name", ["Dana", "dana bot", "", "x" * 36])
def test_rejects_names_that_are_not_instance_names(name: str) -> None:
    with pytest.raises(ValueError):
        render_manifest(name)


def test_committed_manifest_file_matches_the_renderer() -> None:
    # Operators paste manifests/fleet-bot.json; it must not drift from the code.
    path = REPO / "manifests" / "fleet-bot.json"
    assert path.read_text() == dumps(render_manifest(PLACEHOLDER_NAME))


def test_main_prints_the_manifest_of_one_instance_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eli", "--teammates", "/nonexistent"]) == 0
    assert json.loads(capsys.readouterr().out) == render_manifest("eli")


def test_main_rejects_a_bad_name_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["Eli"]) == 1
    assert "invalid instance name" in capsys.readouterr().err


def test_runs_as_a_module() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "nanoslack.ops.manifest", "dana"], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["display_information"]["name"] == "dana"


def test_the_emulators_apps_have_every_scope_and_event_of_the_manifest_by_default() -> None:
    from nanoslack.emulator.state import DEFAULT_EVENTS, DEFAULT_SCOPES

    manifest = render_manifest("dana")
    assert DEFAULT_SCOPES == frozenset(SCOPES) == frozenset(manifest["oauth_config"]["scopes"]["bot"])
    assert DEFAULT_EVENTS == frozenset(manifest["settings"]["event_subscriptions"]["bot_events"])
