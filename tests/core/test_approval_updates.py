"""Every owner's approval DM is updated with the decision, even one still being posted."""

from __future__ import annotations

from nanoslack.gate import Gate
from nanoslack.router import Router
from nanoslack.store import Store
from tests.core.core_helpers import INSTANCE, OWNER, bot_message, make_gate, message

SECOND = "U0SECOND"


def _ask_two_owners(router: Router, store: Store) -> tuple[Gate, int]:
    gate = make_gate(store, [OWNER, SECOND])
    for msg in (message(mention=True, user=OWNER), bot_message(mention=True, text="may I join?")):
        with store.transaction():
            route = router.route(msg)
            if route.engaged:
                gate.judge(msg, route)
    (approval,) = store.approvals.pending()
    return gate, approval.id


def test_a_click_while_another_owners_dm_is_in_flight_updates_that_dm_once_it_is_posted(
    router: Router, store: Store
) -> None:
    gate, approval_id = _ask_two_owners(router, store)
    first, second = store.outbox.queued(INSTANCE)
    assert (first.dm_user, second.dm_user) == (OWNER, SECOND)
    store.outbox.mark_sent(first.id, "D0FIRST", "1700000001.000001")
    assert store.outbox.mark_sending(second.id, "D0SECOND")  # Slack has not answered yet

    assert gate.decide(approval_id, allow=True, by_user=OWNER).applied
    updates = {u.dedupe_key: u for u in store.outbox.queued(INSTANCE) if u.kind == "update"}
    assert len(updates) == 2
    done = next(u for u in updates.values() if u.update_ts)
    waiting = next(u for u in updates.values() if not u.update_ts)
    assert (done.channel, done.update_ts) == ("D0FIRST", "1700000001.000001")
    assert f"Allowed by <@{OWNER}>" in done.text and f"Allowed by <@{OWNER}>" in waiting.text
    # The poster sends it once the DM it updates has its ts.
    assert waiting.update_of == second.dedupe_key


def test_a_dm_not_yet_sent_is_withdrawn_instead_of_updated(router: Router, store: Store) -> None:
    gate, approval_id = _ask_two_owners(router, store)
    first, _second = store.outbox.queued(INSTANCE)
    store.outbox.mark_sent(first.id, "D0FIRST", "1700000001.000001")
    gate.decide(approval_id, allow=False, by_user=OWNER)
    rows = store.outbox.queued(INSTANCE)
    assert [r.kind for r in rows] == ["update"]  # the second owner's DM never goes out
    assert f"Denied by <@{OWNER}>" in rows[0].text
