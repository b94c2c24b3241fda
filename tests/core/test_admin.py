from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from nanoslack.config import load_settings
from nanoslack.gate import Gate
from nanoslack.inbound import Inbound
from nanoslack.ops import admin
from nanoslack.router import Router
from nanoslack.store import Store
from tests.core.core_helpers import INSTANCE, OWNER, ROOM, bot_message, message

ELI = "slack:bot:B0ELI"


def deliver(store: Store, router: Router, gate: Gate, msg: Inbound) -> None:
    with store.transaction():
        route = router.route(msg)
        if route.engaged:
            gate.judge(msg, route)


def run(fn: Callable[..., int], *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = fn(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    for key in ("NANOSLACK_DB", "DATABASE_URL", "SLACK_OWNER", "SLACK_A2A_ROOMS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLACK_INSTANCES", INSTANCE)  # the instance the commands are given


@pytest.fixture
def held_bot(store: Store, router: Router, gate: Gate) -> list[Inbound]:
    """A room opened by a human mention, and three held messages from an unknown bot."""
    deliver(store, router, gate, message(mention=True, user=OWNER))
    store.users.ensure(ELI, kind="bot", display_name="eli")
    msgs = [bot_message(mention=True) for _ in range(3)]
    for m in msgs:
        deliver(store, router, gate, m)
    return msgs


def test_rooms_lists_messaging_groups_as_an_aligned_table(
    store: Store, router: Router, gate: Gate, db_arg: str, tmp_path: Path
) -> None:
    deliver(store, router, gate, message(mention=True))
    (tmp_path / ".env").write_text(f"SLACK_A2A_ROOMS={ROOM}\n")
    code, out = run(admin.rooms_main, "--db", db_arg)
    header, row = out.splitlines()
    assert code == 0
    assert header.split() == ["ID", "INSTANCE", "ROOM", "KIND", "ENGAGE", "PATTERN", "POLICY", "A2A", "NAME"]
    assert row.split() == [
        "1",
        INSTANCE,
        f"slack:{ROOM}",
        "group",
        "mention-sticky",
        "request_approval",
        "yes",
    ]
    assert header.index("POLICY") == row.index("request_approval")


def test_rooms_reads_the_database_from_the_env_file(store: Store, tmp_path: Path, db_arg: str) -> None:
    store.groups.create("slack:C0X", INSTANCE, kind="group")
    env = f"DATABASE_URL={db_arg}" if "://" in db_arg else f"NANOSLACK_DB={Path(db_arg).name}"
    (tmp_path / ".env").write_text(env + "\n")
    code, out = run(admin.rooms_main)
    assert code == 0 and "slack:C0X" in out


def test_missing_database_is_an_error_not_a_new_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run(admin.rooms_main, "--db", str(tmp_path / "nope.db"))
    assert code == 1 and "no database" in capsys.readouterr().err
    assert not (tmp_path / "nope.db").exists()


def test_a_malformed_database_url_is_an_error_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".env").write_text("DATABASE_URL=data/nanoslack.db\n")
    code, _ = run(admin.rooms_main)
    assert code == 1 and "DATABASE_URL: expected an SQLAlchemy URL" in capsys.readouterr().err


def test_operator_commands_find_the_store_where_the_fleet_does(tmp_path: Path) -> None:
    env = {"NANOSLACK_DB": "state/n.db"}
    (tmp_path / "conf").mkdir()
    fleet = load_settings(tmp_path / "conf" / ".env", env).db_url
    assert admin.db_url(None, env, tmp_path / "conf") == fleet
    assert admin.db_url("state/n.db", env) == "sqlite:///" + str((tmp_path / "state" / "n.db").resolve())


def test_hops_lists_counts(store: Store, db_arg: str) -> None:
    for ts in ("1.1", "1.2"):
        store.hops.reserve(room=ROOM, instance=INSTANCE, ts=ts, bot_id="B0ELI", max_hops=6, scope="identity")
    code, out = run(admin.hops_main, "--db", db_arg)
    assert code == 0
    assert out.splitlines()[1].split()[:3] == [ROOM, INSTANCE, "2"]


def test_senders_pending_lists_open_requests_with_held_counts(held_bot: list[Inbound], db_arg: str) -> None:
    code, out = run(admin.senders_main, "--db", db_arg, "pending")
    assert code == 0
    fields = out.splitlines()[1].split()
    assert fields[:6] == ["1", INSTANCE, ELI, "eli", f"slack:{ROOM}", "3"]


def test_senders_approve_via_cli_moves_held_to_pending(
    held_bot: list[Inbound], store: Store, db_arg: str
) -> None:
    code, out = run(admin.senders_main, "--db", db_arg, "approve", INSTANCE, ELI)
    assert code == 0 and "3 held message(s) released" in out
    assert [store.messages.get(m.key).status for m in held_bot] == ["pending"] * 3  # type: ignore[union-attr]
    assert store.agents.is_member(store.agents.ensure(INSTANCE).id, ELI)
    _, pending = run(admin.senders_main, "--db", db_arg, "pending")
    assert pending.strip() == "no pending approvals"


def test_senders_approve_is_seen_by_a_running_gate(
    held_bot: list[Inbound], store: Store, router: Router, gate: Gate, db_arg: str
) -> None:
    run(admin.senders_main, "--db", db_arg, "approve", INSTANCE, ELI)
    nxt = bot_message(mention=True)
    deliver(store, router, gate, nxt)
    row = store.messages.get(nxt.key)
    assert row is not None and row.status == "pending"


def test_senders_deny_via_cli_refuses_held_and_is_remembered(
    held_bot: list[Inbound], store: Store, db_arg: str
) -> None:
    code, out = run(admin.senders_main, "--db", db_arg, "deny", INSTANCE, ELI)
    assert code == 0 and "3 held message(s) refused" in out
    assert {store.messages.get(m.key).status for m in held_bot} == {"refused"}  # type: ignore[union-attr]
    assert store.approvals.find(INSTANCE, ELI).status == "denied"  # type: ignore[union-attr]


def test_senders_approve_reverses_an_earlier_deny(held_bot: list[Inbound], store: Store, db_arg: str) -> None:
    run(admin.senders_main, "--db", db_arg, "deny", INSTANCE, ELI)
    code, out = run(admin.senders_main, "--db", db_arg, "approve", INSTANCE, ELI)
    assert code == 0 and "approved" in out
    assert store.agents.is_member(store.agents.ensure(INSTANCE).id, ELI)


def test_senders_approve_before_any_request_makes_a_member(store: Store, db_arg: str) -> None:
    code, out = run(admin.senders_main, "--db", db_arg, "approve", INSTANCE, "slack:bot:B0NEW")
    assert code == 0 and "now a member" in out
    assert store.agents.is_member(store.agents.ensure(INSTANCE).id, "slack:bot:B0NEW")


def test_senders_deny_without_request_is_an_error(store: Store, db_arg: str) -> None:
    code, _ = run(admin.senders_main, "--db", db_arg, "deny", INSTANCE, "slack:bot:B0NEW")
    assert code == 1


def test_senders_usage_error_exits_2(db_arg: str) -> None:
    code, _ = run(admin.senders_main, "--db", db_arg, "approve", INSTANCE)
    assert code == 2
