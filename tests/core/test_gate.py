from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from nanoslack.asks import NotAnOwner
from nanoslack.gate import Gate, Verdict
from nanoslack.inbound import Inbound
from nanoslack.router import Router
from nanoslack.slack.blocks import action_id, ask_blocks
from nanoslack.store import Store
from tests.core.core_helpers import DM, INSTANCE, OWNER, ROOM, bot_message, make_gate, message

ELI = "slack:bot:B0ELI"


def route_and_judge(router: Router, gate: Gate, msg: Inbound) -> Verdict | None:
    """The pipeline's router → gate step, in one transaction like the real one."""
    with gate_store(gate).transaction():
        route = router.route(msg)
        return gate.judge(msg, route) if route.engaged else None


def gate_store(gate: Gate) -> Store:
    return gate._store  # noqa: SLF001 - tests share the gate's store


def open_room(router: Router, gate: Gate) -> None:
    """A human mention creates the room's messaging group (request_approval)."""
    route_and_judge(router, gate, message(mention=True, user=OWNER))


def test_owner_passes_every_gate(router: Router, gate: Gate, sql: Callable[[str], int]) -> None:
    for policy in ("request_approval", "strict", "decline_notify"):
        open_room(router, gate)
        sql(f"UPDATE messaging_groups SET unknown_sender_policy='{policy}'")
        verdict = route_and_judge(router, gate, message(user=OWNER, mention=True))
        assert verdict == Verdict("allow", "owner")


def test_sql_update_to_public_lets_a_sibling_bots_next_message_through(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    first = bot_message(mention=True)
    assert route_and_judge(router, gate, first) == Verdict("hold", "awaiting approval", 1)
    changed = sql(
        f"UPDATE messaging_groups SET unknown_sender_policy='public' WHERE platform_id='slack:{ROOM}'"
    )
    assert changed == 1
    second = bot_message(mention=True)
    assert route_and_judge(router, gate, second) == Verdict("allow", "public")
    row = store.messages.get(second.key)
    assert row is not None and row.status == "pending"


def test_membership_added_by_sql_applies_to_the_next_message(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='strict'")
    assert route_and_judge(router, gate, bot_message(mention=True)) == Verdict("refuse", "strict")
    agent_group = store.agents.ensure(INSTANCE)
    sql(
        "INSERT INTO agent_group_members (agent_group_id, user_id, role, added_at)"
        f" VALUES ({agent_group.id}, '{ELI}', 'member', 0)"
    )
    assert route_and_judge(router, gate, bot_message(mention=True)) == Verdict("allow", "member")


def test_twenty_messages_from_unknown_bot_make_one_request_and_twenty_held(
    router: Router, gate: Gate, store: Store
) -> None:
    open_room(router, gate)
    verdicts = [route_and_judge(router, gate, bot_message(mention=True, text=f"msg {i}")) for i in range(20)]
    assert {v.action for v in verdicts if v} == {"hold"}
    assert len(store.approvals.pending()) == 1
    requests = store.outbox.queued(INSTANCE)
    assert len(requests) == 1
    assert len(store.messages.held(INSTANCE, ELI)) == 20


def test_a_request_decided_with_sql_is_what_the_senders_next_message_meets(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    # A repeated request reads the row's state afresh every message: nothing cached.
    open_room(router, gate)
    first = route_and_judge(router, gate, bot_message(mention=True))
    assert first is not None and first.action == "hold"
    assert sql(f"UPDATE pending_sender_approvals SET status='denied' WHERE sender_id='{ELI}'") == 1
    assert route_and_judge(router, gate, bot_message(mention=True)) == Verdict("refuse", "denied")
    assert sql(f"UPDATE pending_sender_approvals SET status='approved' WHERE sender_id='{ELI}'") == 1
    assert route_and_judge(router, gate, bot_message(mention=True)) == Verdict("refuse", "membership revoked")
    assert sql(f"UPDATE pending_sender_approvals SET status='pending' WHERE sender_id='{ELI}'") == 1
    assert route_and_judge(router, gate, bot_message(mention=True)) == first
    assert len(store.approvals.list()) == 1 and len(store.outbox.queued(INSTANCE)) == 1


def test_approval_request_is_a_dm_to_every_owner_with_allow_and_deny_buttons(
    router: Router, store: Store
) -> None:
    gate = make_gate(store, [OWNER, "U0SECOND"])
    open_room(router, gate)
    store.users.ensure(ELI, kind="bot", display_name="eli")
    route_and_judge(router, gate, bot_message(mention=True, text="may I join?"))
    request, second = store.outbox.queued(INSTANCE)
    approval = store.approvals.pending()[0]
    assert (request.dm_user, request.purpose) == (OWNER, "ask")
    assert second.dm_user == "U0SECOND" and second.ask_id == request.ask_id is not None
    ask = store.asks.get(request.ask_id)
    assert ask is not None and (ask.kind, ask.ref) == ("approval", str(approval.id))
    # What the owners see: the edge renders the ask as Block Kit.
    section, actions = ask_blocks(ask)
    assert "eli" in section["text"]["text"] and ELI in section["text"]["text"]
    assert f"<#{ROOM}>" in section["text"]["text"] and "may I join?" in section["text"]["text"]
    buttons = {b["action_id"]: b for b in actions["elements"]}
    approve, deny = action_id("approve"), action_id("deny")
    assert (approve, deny) == ("nanoslack_approve", "nanoslack_deny")
    assert buttons[approve]["style"] == "primary"
    assert buttons[approve]["text"]["text"] == "Allow"
    assert buttons[deny]["style"] == "danger"
    assert buttons[deny]["text"]["text"] == "Deny"
    assert {b["value"] for b in buttons.values()} == {str(approval.id)}
    assert approval.owner_id == OWNER


def test_allow_replays_held_messages_exactly_once(router: Router, gate: Gate, store: Store) -> None:
    open_room(router, gate)
    held = [bot_message(mention=True) for _ in range(3)]
    verdicts = [route_and_judge(router, gate, m) for m in held]
    approval_id = verdicts[0].approval_id if verdicts[0] else None
    assert approval_id is not None
    request = store.outbox.queued(INSTANCE)[0]
    store.outbox.mark_sent(request.id, "D0OWNERDM", "1700000099.000001")

    decision = gate.decide(approval_id, allow=True, by_user=OWNER)
    assert decision.applied and decision.released == sorted(m.key for m in held)
    assert store.agents.is_member(store.agents.ensure(INSTANCE).id, ELI)
    assert [m.status for m in map(store.messages.get, decision.released) if m] == ["pending"] * 3

    again = gate.decide(approval_id, allow=True, by_user=OWNER)
    assert not again.applied and again.released == []
    updates = [r for r in store.outbox.queued(INSTANCE) if r.kind == "update"]
    assert len(updates) == 1
    assert updates[0].update_ts == "1700000099.000001" and updates[0].channel == "D0OWNERDM"
    assert f"Allowed by <@{OWNER}>" in updates[0].text
    assert route_and_judge(router, gate, bot_message(mention=True)) == Verdict("allow", "member")


def test_deny_is_remembered_no_second_request_and_no_delivery(
    router: Router, gate: Gate, store: Store
) -> None:
    open_room(router, gate)
    first = bot_message(mention=True)
    verdict = route_and_judge(router, gate, first)
    assert verdict is not None and verdict.approval_id is not None
    decision = gate.decide(verdict.approval_id, allow=False, by_user=OWNER)
    assert decision.refused == [first.key]
    row = store.messages.get(first.key)
    assert row is not None and row.status == "refused"

    later = [route_and_judge(router, gate, bot_message(mention=True)) for _ in range(5)]
    assert {v.action for v in later if v} == {"refuse"}
    assert all(m.sender_id != ELI for m in store.messages.pending(INSTANCE))
    assert [r.dedupe_key for r in store.outbox.queued(INSTANCE)] == []  # the request was withdrawn
    assert [(a.status, a.sender_id) for a in store.approvals.list()] == [("denied", ELI)]
    (audit,) = [r for r in store.refusals.list() if r.reason == "denied"]
    assert audit.count == 6


def test_unanswered_request_is_withdrawn_when_decided_before_it_was_sent(
    router: Router, gate: Gate, store: Store
) -> None:
    open_room(router, gate)
    verdict = route_and_judge(router, gate, bot_message(mention=True))
    assert verdict is not None and verdict.approval_id is not None
    gate.decide(verdict.approval_id, allow=True, by_user="cli")
    ask = store.asks.latest("approval", str(verdict.approval_id))
    assert ask is not None
    (request,) = store.outbox.asking(ask.id)
    assert request is not None and request.status == "cancelled"
    assert store.outbox.queued(INSTANCE) == []


def test_only_owners_or_the_cli_may_decide(router: Router, gate: Gate) -> None:
    open_room(router, gate)
    verdict = route_and_judge(router, gate, bot_message(mention=True))
    assert verdict is not None and verdict.approval_id is not None
    with pytest.raises(NotAnOwner):
        gate.decide(verdict.approval_id, allow=True, by_user="U0RANDOM")
    assert gate.decide(verdict.approval_id, allow=True, by_user="cli").applied


def test_strict_drops_unknown_senders(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='strict'")
    msg = message(user="U0STRANGER", mention=True)
    assert route_and_judge(router, gate, msg) == Verdict("refuse", "strict")
    row = store.messages.get(msg.key)
    assert row is not None and row.status == "refused"
    assert store.outbox.queued(INSTANCE) == [] and store.approvals.list() == []


def test_unknown_policy_value_is_treated_as_strict(
    router: Router, gate: Gate, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='pubilc'")
    assert route_and_judge(router, gate, message(user="U0STRANGER", mention=True)) == Verdict(
        "refuse", "strict"
    )


def test_decline_notify_in_dm_enqueues_one_decline_per_day(router: Router, gate: Gate, store: Store) -> None:
    for _ in range(4):
        verdict = route_and_judge(router, gate, message(channel=DM, user="U0STRANGER", text="hey"))
        assert verdict == Verdict("decline", "declined")
    (decline,) = store.outbox.queued(INSTANCE)
    assert decline.channel == DM and decline.dm_user is None and "Sorry" in decline.text
    (audit,) = store.refusals.list()
    assert (audit.reason, audit.count) == ("declined", 4)


def test_decline_notify_in_a_group_is_strict(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='decline_notify'")
    assert route_and_judge(router, gate, message(user="U0STRANGER", mention=True)) == Verdict(
        "refuse", "strict"
    )
    assert store.outbox.queued(INSTANCE) == []


def test_no_owner_configured_logs_the_cli_command_and_holds(router: Router, store: Store) -> None:
    gate = make_gate(store, [])
    route_and_judge(router, gate, message(mention=True, user="U0HUMAN"))
    with capture_logs() as logs:
        verdict = route_and_judge(router, gate, bot_message(mention=True))
    assert verdict is not None and verdict.action == "hold"
    (entry,) = [e for e in logs if e["event"] == "approval request logged: no owner configured"]
    assert entry["command"] == f"nanoslack senders approve {INSTANCE} {ELI}"
    assert store.outbox.queued(INSTANCE) == []


def test_refusal_audit_counts_with_first_and_last_seen(
    router: Router, gate: Gate, store: Store, sql: Callable[[str], int]
) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='strict'")
    for _ in range(3):
        route_and_judge(router, gate, message(user="U0STRANGER", mention=True))
        time.sleep(0.002)
    (audit,) = store.refusals.list()
    assert (audit.sender_id, audit.reason, audit.count, audit.instance) == (
        "slack:U0STRANGER",
        "strict",
        3,
        INSTANCE,
    )
    assert audit.first_seen < audit.last_seen
    assert audit.platform_id == f"slack:{ROOM}"


def test_refusals_are_logged_for_operators(router: Router, gate: Gate, sql: Callable[[str], int]) -> None:
    open_room(router, gate)
    sql("UPDATE messaging_groups SET unknown_sender_policy='strict'")
    with capture_logs() as logs:
        route_and_judge(router, gate, message(user="U0STRANGER", mention=True))
    (entry,) = [e for e in logs if e["event"] == "sender refused"]
    assert entry["sender"] == "slack:U0STRANGER" and entry["policy"] == "strict"
    assert entry["group"] == f"slack:{ROOM}" and entry["reason"] == "strict"


def test_approval_logs_request_and_decision(router: Router, gate: Gate) -> None:
    open_room(router, gate)
    with capture_logs() as logs:
        verdict = route_and_judge(router, gate, bot_message(mention=True))
        assert verdict is not None and verdict.approval_id is not None
        gate.decide(verdict.approval_id, allow=True, by_user=OWNER)
    events = [e["event"] for e in logs]
    assert "approval requested" in events and "sender approved" in events
