"""``nanoslack doctor`` against the emulator (docs/operations.md): a good workspace passes, and each
deliberately broken one is found, named and given its fix, without a token printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nanoslack.emulator import ThreadedEmulator
from nanoslack.emulator.state import DEFAULT_SCOPES
from nanoslack.ops.envfile import write_env
from tests.ops.conftest import REPO, clean_env

SILENT_SCRIPT = REPO / "nanoslack" / "testing" / "silent_agent.json"


@dataclass
class Doctor:
    code: int
    out: str
    err: str

    @property
    def failures(self) -> list[str]:
        return [line for line in self.out.splitlines() if line.startswith("✗")]


def _workspace(temu: ThreadedEmulator, tmp: Path, names: list[str], **scopes: list[str]) -> dict[str, object]:
    alice = temu.add_user("alice", real_name="Alice")
    apps = {n: temu.add_app(n, **({"scopes": scopes[n]} if n in scopes else {})) for n in names}
    return {"alice": alice, "apps": apps}


def _env(temu: ThreadedEmulator, tmp: Path, apps: dict[str, object], room: str, owner: str) -> Path:
    teammates = tmp / "teammates"
    values = {
        "SLACK_API_URL": temu.api_url,
        "SLACK_INSTANCES": ",".join(apps),
        "SLACK_A2A_ROOMS": room,
        "SLACK_OWNER": owner,
        "NANOSLACK_DB": str(tmp / "data" / "nanoslack.db"),
        "NANOSLACK_TEAMMATES": str(teammates),
        "NANOSLACK_AGENT": "script",
        "NANOSLACK_AGENT_SCRIPT": str(SILENT_SCRIPT),
        "GITHUB_TOKEN": "ghp-not-a-real-one",
    }
    for name, app in apps.items():
        suf = name.upper()
        values |= {f"SLACK_BOT_TOKEN_{suf}": app.bot_token, f"SLACK_APP_TOKEN_{suf}": app.app_token}  # type: ignore[attr-defined]
        folder = teammates / name
        folder.mkdir(parents=True)
        (folder / "SOUL.md").write_text(f"You are {name}.\n")
    mcp = {"mcpServers": {"github": {"command": "gh-mcp", "env": {"TOKEN": "${GITHUB_TOKEN}"}}}}
    (teammates / next(iter(apps)) / "mcp.json").write_text(json.dumps(mcp))
    path = tmp / ".env"
    write_env(path, values, replace=True)
    return path


def _doctor(env: Path, *args: str) -> Doctor:
    r = subprocess.run(
        [sys.executable, "-m", "nanoslack", "doctor", "--env-file", str(env), *args],
        cwd=env.parent,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Doctor(r.returncode, r.stdout, r.stderr)


def _no_token_printed(doctor: Doctor, temu: ThreadedEmulator) -> None:
    secrets = [t for a in temu.apps() for t in (a.bot_token, a.app_token)] + ["ghp-not-a-real-one"]
    for text in (doctor.out, doctor.err):
        for secret in secrets:
            assert secret not in text


Build = Callable[[ThreadedEmulator, Path], Path]


def _good(temu: ThreadedEmulator, tmp: Path) -> Path:
    ws = _workspace(temu, tmp, ["dana", "eli"])
    apps, alice = ws["apps"], ws["alice"]
    room = temu.create_conversation([alice.id, *(a.bot_user_id for a in apps.values())])  # type: ignore[attr-defined, union-attr]
    return _env(temu, tmp, apps, room.id, alice.id)  # type: ignore[arg-type, attr-defined]


def test_a_good_workspace_passes_every_check(temu: ThreadedEmulator, tmp_path: Path) -> None:
    doctor = _doctor(_good(temu, tmp_path), "--agents")
    assert doctor.code == 0, doctor.out + doctor.err
    lines = doctor.out.splitlines()
    assert lines[-1].endswith("all passed")
    assert all(line.startswith("✓") for line in lines[:-1]), doctor.out
    for expected in (
        "dana: bot token works",
        "eli: app-level token opens Socket Mode",
        "bot scopes: all 17",
        "is a member: dana, eli",
        "Alice is a user",
        "back end script answered",
        "store:",
        "mcp.json",
    ):
        assert expected in doctor.out, expected
    _no_token_printed(doctor, temu)


def _doctor_missing(temu: ThreadedEmulator, tmp_path: Path, scopes: set[str]) -> str:
    """doctor on a workspace whose eli app lacks ``scopes``: the one failure it reports."""
    ws = _workspace(temu, tmp_path, ["dana", "eli"], eli=sorted(DEFAULT_SCOPES - scopes))
    apps, alice = ws["apps"], ws["alice"]
    room = temu.create_conversation([alice.id, *(a.bot_user_id for a in apps.values())])  # type: ignore[attr-defined, union-attr]
    doctor = _doctor(_env(temu, tmp_path, apps, room.id, alice.id))  # type: ignore[arg-type, attr-defined]
    assert doctor.code == 1
    [failure] = doctor.failures
    _no_token_printed(doctor, temu)
    return failure


def test_a_missing_scope_is_named_with_the_manifest_to_fix_it(temu: ThreadedEmulator, tmp_path: Path) -> None:
    failure = _doctor_missing(temu, tmp_path, {"reactions:read", "metadata.message:read"})
    assert failure.startswith("✗ eli: bot scopes: missing `reactions:read`, `metadata.message:read`")
    assert (
        "fix: add `reactions:read`, `metadata.message:read` to eli's app: see manifests/fleet-bot.json"
        in failure
    )


def test_an_app_made_before_files_is_told_to_add_the_file_scopes(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    failure = _doctor_missing(temu, tmp_path, {"files:read", "files:write"})
    assert failure.startswith("✗ eli: bot scopes: missing `files:read`, `files:write`")
    assert "files people share cannot be read" in failure


def test_an_app_without_the_agent_surface_is_told_how_to_turn_it_on(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    failure = _doctor_missing(temu, tmp_path, {"assistant:write"})
    assert failure.startswith("✗ eli: bot scopes: missing `assistant:write`")
    assert "turn on Agents & AI Apps in the app's settings" in failure
    assert "assistant_thread_started" in failure


def test_a_bot_missing_from_a_room_is_named_with_the_room(temu: ThreadedEmulator, tmp_path: Path) -> None:
    ws = _workspace(temu, tmp_path, ["dana", "eli", "fay"])
    apps, alice = ws["apps"], ws["alice"]
    # fay joined the fleet later; the room was opened for dana and eli.
    room = temu.create_conversation([alice.id, apps["dana"].bot_user_id, apps["eli"].bot_user_id])  # type: ignore[attr-defined, index]
    doctor = _doctor(_env(temu, tmp_path, apps, room.id, alice.id))  # type: ignore[arg-type, attr-defined]
    assert doctor.code == 1
    [failure] = doctor.failures
    assert failure.startswith(f"✗ room {room.id}: fay is not a member")
    assert "nanoslack open-room --instances dana,eli,fay" in failure
    _no_token_printed(doctor, temu)


def test_a_revoked_token_is_named_with_how_to_get_a_new_one(temu: ThreadedEmulator, tmp_path: Path) -> None:
    env = _good(temu, tmp_path)
    temu.revoke_token(temu.app("eli").bot_token)
    doctor = _doctor(env)
    assert doctor.code == 1
    [failure] = doctor.failures
    assert failure.startswith("✗ eli: bot token refused by auth.test: token_revoked")
    assert "reinstall eli's app" in failure and "SLACK_BOT_TOKEN_ELI" in failure
    _no_token_printed(doctor, temu)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"servers": {}}', 'no "mcpServers" object'),
        ('{"mcpServers": {"x": {"command": "x", "env": {"K": "${UNSET_VAR}"}}}}', "needs ${UNSET_VAR}"),
    ],
)
def test_a_broken_mcp_json_is_reported(
    temu: ThreadedEmulator, tmp_path: Path, content: str, problem: str
) -> None:
    env = _good(temu, tmp_path)
    (tmp_path / "teammates" / "_mcp.json").write_text(content)
    doctor = _doctor(env)
    assert doctor.code == 1
    [failure] = doctor.failures
    assert "_mcp.json" in failure and problem in failure


def _store_report(env: Path) -> list[str]:
    from nanoslack.config import load_settings
    from nanoslack.ops.doctor import Report, check_store

    report = Report()
    check_store(load_settings(env, environ={}), report)
    return [c.line() for c in report.checks]


def test_the_store_is_reported_with_its_schema_version(temu: ThreadedEmulator, tmp_path: Path) -> None:
    from nanoslack.store import Store
    from nanoslack.store.migrations import SCHEMA_VERSION
    from nanoslack.testing.fleet_env import sql

    env = _good(temu, tmp_path)
    db = tmp_path / "data" / "nanoslack.db"
    [fresh] = _store_report(env)
    assert fresh.startswith("✓ store:") and "does not exist yet" in fresh
    Store.open("sqlite:///" + str(db)).close()
    [current] = _store_report(env)
    assert current == f"✓ store: {db} answers; schema version {SCHEMA_VERSION} (current)"
    sql(db, "UPDATE schema_meta SET value = ? WHERE key = 'version'", str(SCHEMA_VERSION + 1))
    [future] = _store_report(env)
    assert future.startswith("✗ store:") and "upgrade nanoslack" in future


def test_an_unreachable_database_is_reported_without_its_password(tmp_path: Path) -> None:
    from nanoslack.config import load_settings
    from nanoslack.ops.doctor import Report, check_store

    env = tmp_path / ".env"
    write_env(
        env, {"DATABASE_URL": "postgresql+psycopg://fleet:s3cret-pw@127.0.0.1:1/nanoslack"}, replace=True
    )
    report = Report()
    check_store(load_settings(env, environ={}), report)
    [line] = [c.line() for c in report.checks]
    assert line.startswith("✗ store: DATABASE_URL does not answer") and "s3cret-pw" not in line


def test_a_rooms_intro_says_which_bots_belong_there(temu: ThreadedEmulator, tmp_path: Path) -> None:
    from nanoslack.ops.open_room import load_env, open_room, parse_request

    ws = _workspace(temu, tmp_path, ["dana", "eli", "fay"])
    apps, alice = ws["apps"], ws["alice"]
    env = _env(temu, tmp_path, apps, "C0PLACEHOLDER", alice.id)  # type: ignore[arg-type, attr-defined]
    # open-room for dana and eli: fay, in the fleet but not named by the intro, is not expected.
    request = parse_request(["--instances", "dana,eli", "--user", alice.id, "--env-file", str(env)])  # type: ignore[attr-defined]
    room = open_room(request, load_env(env, {}))
    write_env(env, {"SLACK_A2A_ROOMS": room})
    doctor = _doctor(env)
    assert doctor.code == 0, doctor.out
    assert (
        f"✓ room {room}: every bot that should be there is a member: dana, eli (its intro names)"
        in doctor.out
    )


def test_each_instances_notes_use_is_reported_against_its_cap(temu: ThreadedEmulator, tmp_path: Path) -> None:
    from nanoslack.store import Store

    env = _good(temu, tmp_path)
    with Store.open("sqlite:///" + str(tmp_path / "data" / "nanoslack.db")) as store:
        store.memories.add(instance="dana", scope="self", text="x" * 1200, asked_by="operator")
        store.memories.add(
            instance="dana", scope="room", text="y" * 300, asked_by="operator", conversation="slack:C1"
        )
    doctor = _doctor(env)
    notes = [line for line in doctor.out.splitlines() if "notes:" in line]
    assert notes == [
        "✓ dana: notes: self 1,200/4,000, private 0/4,000, room notes in 1 conversation(s),"
        " the fullest 300/4,000 characters",
        "✓ eli: notes: self 0/4,000, private 0/4,000 characters",
    ]


def test_every_routines_file_is_checked_and_each_bad_routine_is_named(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    ws = _workspace(temu, tmp_path, ["dana", "eli", "fay"])
    apps, alice = ws["apps"], ws["alice"]
    room = temu.create_conversation([alice.id, apps["dana"].bot_user_id, apps["eli"].bot_user_id])  # type: ignore[index, attr-defined, union-attr]
    away = temu.create_conversation([alice.id, apps["fay"].bot_user_id, temu.add_user("bob").id])  # type: ignore[index, attr-defined, union-attr]
    env = _env(temu, tmp_path, {"dana": apps["dana"], "eli": apps["eli"]}, room.id, alice.id)  # type: ignore[index, attr-defined]
    good = f'[[routine]]\nname = "plan"\ncron = "0 9 * * 1-5"\nchannel = "{room.id}"\nprompt = "Plan."\n'
    (tmp_path / "teammates" / "dana" / "routines.toml").write_text(good)
    bad = (
        '[[routine]]\nname = "zero"\nevery = "0s"\nprompt = "p"\n\n'
        f'[[routine]]\nname = "elsewhere"\nevery = "1h"\nchannel = "{away.id}"\nprompt = "p"\n'
    )
    (tmp_path / "teammates" / "eli" / "routines.toml").write_text(bad)
    doctor = _doctor(env)
    assert "✓ dana:" in doctor.out and "has 1 routine(s)" in doctor.out, doctor.out
    failures = doctor.failures
    assert any("eli routine zero" in f and "below 1 s" in f for f in failures), failures
    # Each hint names the fix, not the file again.
    assert any("eli routine zero" in f and "fix: write every as <n>s" in f for f in failures), failures
    assert "fix it in routines.toml" not in doctor.out
    assert any("eli routine elsewhere" in f and "bot is not in it" in f for f in failures), failures
    assert doctor.code == 1


def test_every_malformed_value_fails_naming_the_key_value_expectation_and_what_is_used(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    env = _good(temu, tmp_path)
    write_env(
        env,
        {
            "SLACK_A2A_MAX_HOPS": "three",
            "NANOSLACK_HISTORY_CHARS": "lots",
            "NANOSLACK_TZ": "Mars/Base",
            "NANOSLACK_ROOM_USD": "ten",
        },
    )
    doctor = _doctor(env)
    assert doctor.code == 1, doctor.out
    failures = doctor.failures
    for key, value, expected, using in (
        ("SLACK_A2A_MAX_HOPS", "'three'", "an integer > 0", "6"),
        ("NANOSLACK_HISTORY_CHARS", "'lots'", "an integer > 0", "48000"),
        ("NANOSLACK_TZ", "'Mars/Base'", "an IANA time zone", "UTC"),
        ("NANOSLACK_ROOM_USD", "'ten'", "US dollars > 0", "unlimited"),
    ):
        [line] = [f for f in failures if f"{key}={value}" in f]
        assert expected in line and f"the fleet uses {using}" in line, line
        # run's warning carries the same words, as fields (doctor's stderr is the fleet's log)
        assert f"config value malformed: {key}" in doctor.err
    assert doctor.out.splitlines()[-1] == f"{len(doctor.out.splitlines()) - 1} checks, 4 failed"


def test_a_soul_front_matter_that_does_not_parse_fails_with_its_file_and_line(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    env = _good(temu, tmp_path)
    soul = tmp_path / "teammates" / "eli" / "SOUL.md"
    soul.write_text("---\nrole: engineer\nYou are eli.\n")
    doctor = _doctor(env)
    assert doctor.code == 1, doctor.out
    [line] = [f for f in doctor.failures if "SOUL.md front matter malformed" in f]
    assert line.startswith("✗ eli:") and f"{soul}:1: front matter opened with --- is never closed" in line


def test_a_skills_front_matter_that_does_not_parse_fails_with_its_file_and_line(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    env = _good(temu, tmp_path)
    skill = tmp_path / "teammates" / "_skills" / "handoff.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text("---\nname: handoff\ndescription: one ask per teammate\n")
    doctor = _doctor(env)
    assert doctor.code == 1, doctor.out
    [line] = [f for f in doctor.failures if "skill front matter malformed" in f]
    assert f"{skill}:1: front matter opened with --- is never closed" in line


def test_doctor_says_which_dm_surface_each_app_uses_and_that_assistant_view_is_retiring(
    temu: ThreadedEmulator, tmp_path: Path
) -> None:
    env = _good(temu, tmp_path)
    with env.open("a") as f:
        f.write("NANOSLACK_SLACK_VIEW_ELI=assistant\n")
    doctor = _doctor(env)
    assert "✓ dana: Slack app surface: agent_view" in doctor.out, doctor.out
    [eli] = [line for line in doctor.out.splitlines() if "eli: Slack app surface" in line]
    assert eli.startswith("✓") and "assistant_view, still served" in eli and "retiring" in eli
    assert "nanoslack manifest eli" in eli

    env.write_text(env.read_text().replace("VIEW_ELI=assistant", "VIEW_ELI=pane"))
    doctor = _doctor(env)
    assert any(
        "NANOSLACK_SLACK_VIEW_ELI: expected agent or assistant, got 'pane'" in f for f in doctor.failures
    )
