from __future__ import annotations

from collections.abc import Callable

from nanoslack.router import Router
from nanoslack.store import Store
from tests.core.core_helpers import DM, INSTANCE, ROOM, bot_message, make_router, message

ROOM_ID = 1  # the first messaging group created


def test_human_mention_in_new_mpim_creates_group_with_group_defaults(router: Router, store: Store) -> None:
    route = router.route(message(mention=True))
    assert route.engaged and route.reason == "mention"
    group = store.groups.get(f"slack:{ROOM}", INSTANCE)
    assert group is not None and route.group == group
    assert (group.kind, group.engage_mode, group.unknown_sender_policy) == (
        "group",
        "mention-sticky",
        "request_approval",
    )


def test_non_mention_in_unknown_conversation_creates_nothing_but_is_kept_as_context(
    router: Router, store: Store
) -> None:
    msg = message(text="just chatting")
    route = router.route(msg)
    assert not route.engaged and route.group is None and route.reason == "no messaging group"
    assert store.groups.list() == []
    row = store.messages.get(msg.key)
    assert row is not None and row.status == "context" and row.messaging_group_id is None


def test_dm_always_engages_and_creates_dm_group_with_dm_defaults(router: Router, store: Store) -> None:
    route = router.route(message(channel=DM, text="hi there"))
    assert route.engaged and route.reason == "dm"
    group = route.group
    assert group is not None
    assert (group.kind, group.engage_mode, group.engage_pattern, group.unknown_sender_policy) == (
        "dm",
        "pattern",
        ".",
        "decline_notify",
    )
    assert router.route(message(channel=DM, text="")).engaged  # "." engages even an empty text


def test_mention_sticky_keeps_answering_the_mentioned_thread_but_not_others(router: Router) -> None:
    parent = message(mention=True)
    assert router.route(parent).engaged
    follow_up = router.route(message(thread_ts=parent.ts, text="and another thing"))
    assert follow_up.engaged and follow_up.reason == "sticky thread"
    other_top_level = router.route(message(text="unrelated"))
    assert not other_top_level.engaged and other_top_level.reason == "not mentioned"
    other_thread = router.route(message(thread_ts="1600000000.000001", text="elsewhere"))
    assert not other_thread.engaged


def test_stickiness_survives_a_new_router(router: Router, store: Store) -> None:
    parent = message(mention=True)
    router.route(parent)
    fresh = make_router(store)
    assert fresh.route(message(thread_ts=parent.ts)).engaged


def test_dm_is_never_sticky(router: Router, sql: Callable[[str], int]) -> None:
    router.route(message(channel=DM, mention=True))
    sql(f"UPDATE messaging_groups SET engage_mode='mention-sticky' WHERE platform_id='slack:{DM}'")
    assert router.route(message(channel=DM, mention=True)).engaged
    assert not router.route(message(channel=DM, text="no mention")).engaged


def test_pattern_mode_engages_on_regex_match_only(router: Router, sql: Callable[[str], int]) -> None:
    router.route(message(mention=True))
    sql(f"UPDATE messaging_groups SET engage_mode='pattern', engage_pattern='(?i)deploy' WHERE id={ROOM_ID}")
    assert router.route(message(text="please DEPLOY now")).reason == "pattern"
    assert not router.route(message(text="lunch?")).engaged


def test_invalid_pattern_engages_nothing_instead_of_crashing(
    router: Router, sql: Callable[[str], int]
) -> None:
    router.route(message(mention=True))
    sql(f"UPDATE messaging_groups SET engage_mode='pattern', engage_pattern='(' WHERE id={ROOM_ID}")
    assert not router.route(message(text="(")).engaged


def test_mention_mode_is_not_sticky(router: Router, sql: Callable[[str], int]) -> None:
    parent = message(mention=True)
    router.route(parent)
    sql(f"UPDATE messaging_groups SET engage_mode='mention' WHERE platform_id='slack:{ROOM}'")
    assert not router.route(message(thread_ts=parent.ts)).engaged
    assert router.route(message(thread_ts=parent.ts, mention=True)).engaged


def test_first_sight_creates_users_rows_for_humans_and_bots(router: Router, store: Store) -> None:
    router.route(message(user="U0ANN"))
    router.route(bot_message("B0ELI", bot_name="eli"))
    ann, eli = store.users.get("slack:U0ANN"), store.users.get("slack:bot:B0ELI")
    assert ann is not None and ann.kind == "human" and ann.slack_user_id == "U0ANN"
    assert eli is not None and eli.kind == "bot" and eli.display_name == "eli"


def test_users_ensure_never_erases_a_known_name(store: Store) -> None:
    store.users.ensure("slack:bot:B1", kind="bot", display_name="eli")
    assert store.users.ensure("slack:bot:B1", kind="bot").display_name == "eli"
    assert store.users.ensure("slack:bot:B1", kind="bot", display_name="Eli 2").display_name == "Eli 2"


def test_group_created_in_rolled_back_transaction_is_not_served_from_cache(
    router: Router, store: Store
) -> None:
    try:
        with store.transaction():
            router.route(message(mention=True))
            raise RuntimeError("downstream failed")
    except RuntimeError:
        pass
    assert store.groups.list() == []
    route = router.route(message(text="no mention"))
    assert route.group is None
