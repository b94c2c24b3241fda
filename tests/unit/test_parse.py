from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoslack.inbound import Drop, FileRef, Inbound
from nanoslack.slack import parse as parse_module
from nanoslack.slack.parse import extract_mentions, is_self, parse_event

TEAM = "T0TEAM"


def body(**event: Any) -> dict[str, Any]:
    base_event: dict[str, Any] = {
        "type": "message",
        "channel": "G0A",
        "channel_type": "mpim",
        "ts": "1.000100",
        "user": "U0H",
    }
    base_event.update(event)
    return {
        "type": "event_callback",
        "team_id": TEAM,
        "api_app_id": "A0APP",
        "event_id": "Ev01",
        "event": {k: v for k, v in base_event.items() if v is not ...},
    }


def parse(payload: Any, team_id: str | None = TEAM) -> Inbound | Drop:
    return parse_event(payload, instance="dana", team_id=team_id)


def parsed(payload: Any) -> Inbound:
    result = parse(payload)
    assert isinstance(result, Inbound), result
    return result


# -- what is kept --------------------------------------------------------------------------------


def test_human_message_keeps_slacks_fields_and_a_human_sender() -> None:
    msg = parsed(body(text="hi <@U0BOT>", thread_ts="0.5"))
    assert (msg.instance, msg.team_id, msg.channel, msg.channel_type) == ("dana", TEAM, "G0A", "mpim")
    assert (msg.ts, msg.thread_ts, msg.user, msg.bot_id) == ("1.000100", "0.5", "U0H", None)
    assert (msg.text, msg.mentions, msg.event_type, msg.event_id) == (
        "hi <@U0BOT>",
        ("U0BOT",),
        "message",
        "Ev01",
    )
    assert msg.sender_id == "slack:U0H" and not msg.is_bot


def test_modern_bot_message_is_bot_authored_with_no_sender_until_admitted() -> None:
    msg = parsed(body(user="U0ELIBOT", bot_id="B0ELI", bot_profile={"id": "B0ELI", "name": "eli"}))
    assert msg.is_bot and msg.bot_id == "B0ELI" and msg.user == "U0ELIBOT"
    assert msg.sender_id == "" and msg.bot_name == "eli"


def test_legacy_bot_message_subtype_uses_its_bot_id_and_username() -> None:
    msg = parsed(body(subtype="bot_message", user=..., bot_id="B0OLD", username="hook"))
    assert msg.is_bot and msg.bot_id == "B0OLD" and msg.bot_name == "hook" and msg.subtype == "bot_message"


def test_legacy_bot_message_without_bot_id_is_dropped() -> None:
    assert parse(body(subtype="bot_message", user=...)) == Drop("bot message without bot_id")


@pytest.mark.parametrize("subtype", ["file_share", "thread_broadcast", "me_message"])
def test_human_authored_subtypes_are_kept(subtype: str) -> None:
    assert parsed(body(subtype=subtype)).subtype == subtype


@pytest.mark.parametrize(
    "subtype",
    [
        "message_replied",
        "channel_join",
        "channel_leave",
        "group_join",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "channel_archive",
        "something_new",
    ],
)
def test_other_subtypes_are_dropped_naming_the_subtype(subtype: str) -> None:
    assert parse(body(subtype=subtype)) == Drop(f"subtype ignored: {subtype}")


# -- edits and deletes (docs/agents.md, "Edits and deletes") ---------------------------------------


def edit(new: str, old: str = "hi", **inner: Any) -> dict[str, Any]:
    fields = {"type": "message", "user": "U0H", "text": new, "ts": "1.000100", **inner}
    message = {k: v for k, v in fields.items() if v is not ...}
    previous = {"type": "message", "user": "U0H", "text": old, "ts": "1.000100"}
    return body(
        subtype="message_changed", user=..., ts="2.000200", message=message, previous_message=previous
    )


def test_an_edit_is_a_change_to_its_message_keyed_by_its_own_event_ts() -> None:
    msg = parsed(edit("hi <@U0BOT>", thread_ts="0.5"))
    assert (msg.subtype, msg.ts, msg.item_ts, msg.thread_ts) == (
        "message_changed",
        "2.000200",
        "1.000100",
        "0.5",
    )
    assert (msg.user, msg.sender_id, msg.text) == ("U0H", "slack:U0H", "hi <@U0BOT>")
    assert msg.is_change and msg.newly_named == ("U0BOT",)


def test_an_edit_keeping_a_mention_names_nobody_newly() -> None:
    msg = parsed(edit("<@U0BOT> bye", old="<@U0BOT> hi"))
    assert msg.mentions == ("U0BOT",) and msg.newly_named == ()


def test_an_edit_that_changes_no_words_is_dropped() -> None:
    assert parse(edit("hi", old="hi")) == Drop("edit without a change of text")


def test_a_deletion_names_the_deleted_message_and_its_author() -> None:
    previous = {"type": "message", "user": "U0H", "text": "secret", "ts": "1.000100", "thread_ts": "0.5"}
    payload = body(
        subtype="message_deleted", user=..., ts="3.0", deleted_ts="1.000100", previous_message=previous
    )
    msg = parsed(payload)
    assert (msg.subtype, msg.ts, msg.item_ts, msg.thread_ts, msg.text) == (
        "message_deleted",
        "3.0",
        "1.000100",
        "0.5",
        "",
    )


def test_a_bots_edit_keeps_its_bot_id() -> None:
    msg = parsed(edit("done", old="working…", user="U0BOTUSER", bot_id="B0PEER"))
    assert msg.is_bot and msg.sender_id == ""


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (body(subtype="message_changed", user=..., message="oops"), "message_changed without message"),
        (body(subtype="message_deleted", user=...), "message_deleted without previous_message"),
        (
            body(subtype="message_deleted", user=..., previous_message={"user": "U0H", "ts": "1.1"}),
            "message_deleted without item_ts",
        ),
        (edit("x", ts=...), "message_changed without item_ts"),
        (edit("x", user=...), "message_changed without its author"),
        (edit("x", user="not a user"), "message_changed: malformed user"),
        (edit(["x"]), "message_changed: text is not a string"),  # type: ignore[arg-type]
    ],
)
def test_malformed_edits_and_deletions_are_dropped_with_a_reason(
    payload: dict[str, Any], reason: str
) -> None:
    assert parse(payload) == Drop(reason)


def test_app_mention_and_its_message_twin_share_one_key() -> None:
    message = parsed(body(text="<@U0DANA> go"))
    mention = parsed(body(type="app_mention", channel_type=..., text="<@U0DANA> go"))
    assert message.key == mention.key == ("dana", "G0A", "1.000100")
    assert mention.event_type == "app_mention" and mention.channel_type is None


def test_mentions_are_read_from_user_tokens_in_order_without_duplicates() -> None:
    text = "<@U01> and <@W02|bob>, again <@U01>; not <#C03>, <!here>, <@B04> or @U05"
    assert extract_mentions(text) == ("U01", "W02")
    assert parsed(body(text=text)).mentions == ("U01", "W02")


def test_text_that_looks_like_a_bot_never_makes_a_human_a_bot_sender() -> None:
    msg = parsed(body(text="bot_id: B0EVIL slack:bot:B0EVIL <@B0EVIL>", username="eli"))
    assert not msg.is_bot and msg.sender_id == "slack:U0H" and msg.bot_name is None


def test_absent_text_is_empty() -> None:
    assert parsed(body(subtype="file_share")).text == ""


def test_empty_bot_id_counts_as_absent() -> None:
    msg = parsed(body(bot_id=""))
    assert not msg.is_bot and msg.sender_id == "slack:U0H"


# -- what is dropped -----------------------------------------------------------------------------


def test_events_from_another_team_are_dropped() -> None:
    assert parse(body(), team_id="T0OTHER") == Drop("event from another team")


def test_unknown_instance_team_accepts_the_payloads_team() -> None:
    assert parsed_team(parse(body(), team_id=None)) == TEAM


def parsed_team(result: Inbound | Drop) -> str | None:
    assert isinstance(result, Inbound)
    return result.team_id


@pytest.mark.parametrize("event_type", ["reaction_removed", "member_joined_channel", None, 3])
def test_other_event_types_are_dropped(event_type: object) -> None:
    result = parse(body(type=event_type))
    assert isinstance(result, Drop) and result.reason.startswith("event type ignored")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, "payload is not an object"),
        ([], "payload is not an object"),
        ({"type": "url_verification"}, "not an event_callback: url_verification"),
        ({"type": "event_callback"}, "no event in payload"),
        ({"type": "event_callback", "event": "message"}, "no event in payload"),
        (body(channel=...), "missing channel"),
        (body(channel=42), "ill-typed channel"),
        (body(ts=...), "missing ts"),
        (body(ts=1.5), "ill-typed ts"),
        (body(text=["x"]), "text is not a string"),
        (body(user=...), "human message without user"),
        (body(subtype=7), "ill-typed subtype"),
    ],
)
def test_malformed_payloads_are_dropped_with_a_reason(payload: Any, reason: str) -> None:
    assert parse(payload) == Drop(reason)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
event_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "app_mention"]) | json_values,
        "subtype": st.sampled_from([None, "bot_message", "message_changed", "file_share"]) | json_values,
        "channel": st.sampled_from(["G0A", ""]) | json_values,
        "ts": st.sampled_from(["1.1"]) | json_values,
        "user": st.sampled_from(["U0H"]) | json_values,
        "bot_id": st.sampled_from(["B0", ""]) | json_values,
        "text": st.text(max_size=30) | json_values,
        "bot_profile": json_values,
        "username": json_values,
        "thread_ts": json_values,
        "channel_type": json_values,
        "team": st.sampled_from([TEAM, "T0PARTNER"]) | json_values,
        "user_team": st.sampled_from([TEAM, "E0ORG"]) | json_values,
        "attachments": st.lists(
            st.fixed_dictionaries(
                {}, optional={k: json_values for k in ("pretext", "title", "text", "fallback", "author_name")}
            )
            | json_values,
            max_size=3,
        )
        | json_values,
        "files": st.lists(st.fixed_dictionaries({}, optional={"name": json_values}) | json_values, max_size=3)
        | json_values,
    },
)
authorizations_like = st.lists(
    st.fixed_dictionaries(
        {}, optional={"team_id": st.sampled_from([TEAM, None]) | json_values, "enterprise_id": json_values}
    )
    | json_values,
    max_size=2,
)
payload_like = json_values | st.fixed_dictionaries(
    {"type": st.just("event_callback") | json_values},
    optional={
        "event": event_like | json_values,
        "team_id": json_values,
        "event_id": json_values,
        "enterprise_id": json_values,
        "authorizations": authorizations_like | json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(payload_like, st.none() | st.just(TEAM))
def test_parse_event_never_raises_on_arbitrary_json_like_input(payload: Any, team_id: str | None) -> None:
    result = parse(payload, team_id=team_id)
    assert isinstance(result, Inbound | Drop)
    # The catch-all is a last resort; every input shape should have its own reason.
    assert not (isinstance(result, Drop) and result.reason.startswith("malformed payload")), result
    if isinstance(result, Inbound):
        # Whatever the input, a kept message has Slack-typed identity fields.
        assert isinstance(result.channel, str) and isinstance(result.ts, str) and isinstance(result.text, str)
        assert result.is_bot or result.sender_id == f"slack:{result.user}"
        assert not result.is_bot or result.sender_id == ""


@settings(max_examples=600, deadline=None)
@given(payload_like, st.none() | st.just(TEAM))
def test_the_straight_path_keeps_exactly_what_the_full_checks_keep(payload: Any, team_id: str | None) -> None:
    # The straight path may decline anything (the full checks then decide), but what it
    # keeps must be what the full checks make of the same payload.
    straight = parse_module._parse_plain(payload, "dana", team_id)
    if straight is not None:
        assert straight == parse_module._parse(payload, instance="dana", team_id=team_id)


@pytest.mark.parametrize(
    "payload",
    [
        body(),
        body(text="hi <@U0DANA> and <@W0X|x> <@U0DANA>"),
        body(type="app_mention", thread_ts="1.000050"),
        body(user=..., bot_id="B0ELI", subtype="bot_message", bot_profile={"name": "eli"}),
        body(bot_id="B0ELI", metadata={"event_type": "nanoslack_room_intro"}),
        body(attachments=[{"text": "quoted"}], files=[{"name": "a.txt"}]),
        body(user_team="E0ORG", team="T0OTHER"),
        {**body(), "authorizations": [{"team_id": TEAM}]},
    ],
)
def test_plain_messages_take_the_straight_path(payload: Any) -> None:
    straight = parse_module._parse_plain(payload, "dana", TEAM)
    assert straight is not None
    assert straight == parse_module._parse(payload, instance="dana", team_id=TEAM)


# -- self filter ---------------------------------------------------------------------------------


def test_own_post_is_recognised_by_bot_user_id_or_bot_id() -> None:
    own = parsed(body(user="U0DANABOT", bot_id="B0DANA"))
    assert is_self(own, bot_user_id="U0DANABOT", bot_id=None)
    assert is_self(own, bot_user_id=None, bot_id="B0DANA")
    assert not is_self(own, bot_user_id="U0OTHER", bot_id="B0OTHER")


def test_unknown_identity_matches_nothing() -> None:
    human = parsed(body(user="U0H"))
    assert not is_self(human, bot_user_id=None, bot_id=None)
    assert not is_self(human, bot_user_id="", bot_id="")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user", "<@U"),
        ("user", "\x00"),
        ("user", "u123abc"),
        ("user", "U" + "X" * 40),
        ("bot_id", "xxxx"),
        ("bot_id", "U0ELI"),
        ("channel", "#general"),
        ("channel", "C0 ROOM"),
        ("ts", "soon"),
        ("ts", "1700000000"),
        ("thread_ts", "1700000000.1.2"),
        ("channel_type", "telepathy"),
    ],
)
def test_junk_ids_never_become_senders_or_room_keys(field: str, value: str) -> None:
    result = parse(body(**{field: value}))
    assert isinstance(result, Drop)
    assert result.reason == f"malformed {field}"


# -- reactions (room control) ---------------------------------------------------------------------


def reaction(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "reaction_added",
        "user": "U0OWNER",
        "reaction": "octagonal_sign",
        "item_user": "U0B",
        "item": {"type": "message", "channel": "G0A", "ts": "1.000100"},
        "event_ts": "2.000200",
    }
    event.update(overrides)
    return {"type": "event_callback", "team_id": TEAM, "event_id": "Ev02", "event": event}


def test_a_reaction_to_a_message_is_kept_with_its_emoji_and_the_message_it_marks() -> None:
    msg = parsed(reaction())
    assert (msg.event_type, msg.reaction, msg.channel, msg.item_ts) == (
        "reaction_added",
        "octagonal_sign",
        "G0A",
        "1.000100",
    )
    # Keyed by the event's own ts: two reactions to one message are two events.
    assert msg.ts == "2.000200"
    assert msg.sender == "slack:U0OWNER" and not msg.is_bot


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"item": {"type": "file", "file": "F0"}}, "reaction to something other than a message"),
        ({"reaction": 3}, "reaction without a name"),
        ({"user": None}, "reaction without user"),
        ({"item": {"type": "message", "channel": "G0A"}}, "reaction without item_ts"),
        ({"item": {"type": "message", "channel": "x!", "ts": "1.0"}}, "malformed channel"),
    ],
)
def test_malformed_reactions_are_dropped(overrides: dict[str, Any], reason: str) -> None:
    assert parse(reaction(**overrides)) == Drop(reason)


def test_a_reaction_survives_the_inbox_round_trip() -> None:
    msg = parsed(reaction())
    assert Inbound.from_payload(msg.to_payload()) == msg


def test_a_messages_files_are_kept_as_refs_and_ill_typed_fields_become_empty_not_a_drop() -> None:
    files = [
        {
            "id": "F0A",
            "name": "q3.csv",
            "mimetype": "text/csv",
            "size": 38,
            "url_private": "https://files.slack.com/files-pri/T0-F0A/q3.csv",
            "url_private_download": "https://files.slack.com/files-pri/T0-F0A/download/q3.csv",
        },
        {"id": "F0B", "file_access": "check_file_info"},
        {"id": 7, "title": "odd", "size": "big", "url_private": ["x"]},
        "not an object",
    ]
    msg = parsed(body(subtype="file_share", text="see", files=files))
    assert msg.files == (
        FileRef("F0A", "q3.csv", "text/csv", 38, "https://files.slack.com/files-pri/T0-F0A/download/q3.csv"),
        FileRef("F0B", "", "", 0, "", "check_file_info"),
        FileRef("", "odd", "", 0, ""),
    )
    assert msg.text == "see\n[file: q3.csv]\n[file]\n[file: odd]"
    # The straight path and the full checks agree, and the inbox payload keeps them.
    assert (
        parse_module._parse(
            body(subtype="file_share", text="see", files=files), instance="dana", team_id=TEAM
        )
        == msg
    )
    assert Inbound.from_payload(msg.to_payload()) == msg
