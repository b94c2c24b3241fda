"""Payloads in the shapes Slack documents (and other projects recorded) that the parser
once misread: Slack Connect / Enterprise Grid teams, Slackbot's notices, content that
lives only in attachments and files. What reaches an agent must be what Slack meant."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from nanoslack.a2a import A2APolicy, install_a2a_policy
from nanoslack.config import A2AConfig
from nanoslack.guard import Admitted, BotInboundGuard
from nanoslack.inbound import PAYLOAD_FIELDS, Drop, Inbound
from nanoslack.slack.parse import parse_event
from nanoslack.store import Store

OURS = "T0OURS"
HOST = "T0HOST"  # the partner team hosting a Slack Connect channel
PARTNER = "T0PARTNER"
BOT_USER = "U0DANABOT"


def authorization(team_id: str | None = OURS, enterprise_id: str | None = None) -> dict[str, Any]:
    """`authorizations[0]`: the installation that received the event."""
    return {
        "enterprise_id": enterprise_id,
        "team_id": team_id,
        "user_id": BOT_USER,
        "is_bot": True,
        "is_enterprise_install": team_id is None,
    }


def envelope(event: dict[str, Any], *, team_id: str = OURS, **outer: Any) -> dict[str, Any]:
    return {
        "token": "XXYYZZ",
        "team_id": team_id,
        "api_app_id": "A0APP",
        "event": event,
        "type": "event_callback",
        "event_id": "Ev0SHAPE",
        "event_time": 1700000000,
        **outer,
    }


def message(**fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "message",
        "channel": "C0SHARED",
        "channel_type": "channel",
        "user": "U0ALICE",
        "text": "hello",
        "ts": "1700000000.000100",
        "event_ts": "1700000000.000100",
        "team": OURS,
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not ...}


def parse(payload: dict[str, Any], team_id: str | None = OURS) -> Inbound | Drop:
    return parse_event(payload, instance="dana", team_id=team_id)


def kept(payload: dict[str, Any], team_id: str | None = OURS) -> Inbound:
    result = parse(payload, team_id)
    assert isinstance(result, Inbound), result
    return result


# -- Slack Connect and Enterprise Grid -----------------------------------------------------------


def test_own_workspace_message_in_shared_channel_is_kept() -> None:
    # In a channel hosted by another team the envelope names the host; the
    # authorization names us (bolt-python's Slack Connect fixtures have this shape).
    payload = envelope(
        message(team=OURS, user_team=OURS, source_team=OURS),
        team_id=HOST,
        enterprise_id="E0HOST",
        authorizations=[authorization()],
        is_ext_shared_channel=True,
    )
    msg = kept(payload)
    assert (msg.user, msg.sender_id, msg.team_id, msg.text) == ("U0ALICE", "slack:U0ALICE", OURS, "hello")


def test_own_workspace_mention_in_shared_channel_is_kept_and_mentions_us() -> None:
    # app_mention in a shared channel: `team` is the host, `user_team` the author's.
    event = message(
        type="app_mention",
        channel_type=...,
        text=f"<@{BOT_USER}> hey",
        team=HOST,
        user_team=OURS,
        source_team=OURS,
        user_profile={"team": OURS},
    )
    payload = envelope(event, team_id=HOST, authorizations=[authorization()], is_ext_shared_channel=True)
    msg = kept(payload)
    assert msg.mentions == (BOT_USER,) and msg.team_id == OURS and msg.event_type == "app_mention"


def test_external_sender_in_shared_channel_is_kept_for_the_gate_with_their_team() -> None:
    payload = envelope(
        message(user="U0PARTNER", team=PARTNER, user_team=PARTNER, source_team=PARTNER),
        team_id=PARTNER,
        authorizations=[authorization()],
        is_ext_shared_channel=True,
    )
    msg = kept(payload)
    # An unknown human like any other: the gate decides (approval, decline), not the parser.
    assert msg.sender_id == "slack:U0PARTNER" and not msg.is_bot
    assert msg.team_id == PARTNER


def test_external_bot_in_shared_channel_reaches_the_guard_as_a_bot() -> None:
    payload = envelope(
        message(user="U0PBOT", bot_id="B0PBOT", team=PARTNER, user_team=PARTNER),
        team_id=PARTNER,
        authorizations=[authorization()],
    )
    msg = kept(payload)
    assert msg.is_bot and msg.sender_id == "" and msg.team_id == PARTNER


def test_grid_author_known_only_by_org_carries_the_org() -> None:
    event = message(type="app_mention", channel_type=..., team=HOST, user_team="E0ORG", source_team="E0ORG")
    assert kept(envelope(event, team_id=HOST, authorizations=[authorization()])).team_id == "E0ORG"


@pytest.mark.parametrize(
    "auth",
    [
        authorization(team_id="T0OTHER"),
        authorization(team_id="T0SIBLING", enterprise_id="E0ORG"),
        authorization(team_id=None, enterprise_id="E0OTHERORG"),
    ],
    ids=["other workspace", "sibling workspace of our org", "another org-wide install"],
)
def test_event_delivered_to_another_installation_is_dropped(auth: dict[str, Any]) -> None:
    # Even though the envelope names our team (we host the channel).
    payload = envelope(message(), team_id=OURS, authorizations=[auth], is_ext_shared_channel=True)
    assert parse(payload) == Drop("event from another team")


def test_org_wide_install_matches_its_enterprise() -> None:
    # An org-wide installation: auth.test names the org, the authorization has no team.
    payload = envelope(
        message(team="T0WS1"),
        team_id="T0WS1",
        enterprise_id="E0ORG",
        authorizations=[authorization(team_id=None, enterprise_id="E0ORG")],
    )
    assert kept(payload, team_id="E0ORG").team_id == "T0WS1"


def test_workspace_install_on_a_grid_matches_its_workspace() -> None:
    payload = envelope(
        message(), enterprise_id="E0ORG", authorizations=[authorization(team_id=OURS, enterprise_id="E0ORG")]
    )
    assert kept(payload).team_id == OURS


@pytest.mark.parametrize("authorizations", [..., None, [], "T0OURS", [None], [7]])
def test_without_a_usable_authorization_the_envelope_team_decides(authorizations: Any) -> None:
    outer = {} if authorizations is ... else {"authorizations": authorizations}
    assert isinstance(parse(envelope(message(), team_id=OURS, **outer)), Inbound)
    assert parse(envelope(message(), team_id="T0OTHER", **outer)) == Drop("event from another team")


@pytest.mark.parametrize("junk", ["", 42, "<@U0EVIL>", "t0lower", {"id": "T0X"}])
def test_junk_author_team_never_becomes_the_message_team(junk: object) -> None:
    payload = envelope(message(team=..., user_team=junk), authorizations=[authorization()])
    assert kept(payload).team_id == OURS


# -- Slackbot ------------------------------------------------------------------------------------


def slackbot_notice(channel: str = "D0DANA", channel_type: str = "im") -> dict[str, Any]:
    # As Slack delivers it (node-slack-sdk#211): a plain user message from USLACKBOT, no bot_id.
    return envelope(
        message(
            user="USLACKBOT",
            text="You have been removed from #test by <@U0ALICE|alice>",
            user_team=OURS,
            user_profile={"real_name": "slackbot", "name": "slackbot", "first_name": "slackbot"},
            channel=channel,
            channel_type=channel_type,
        ),
        authorizations=[authorization()],
    )


def test_slackbot_notice_is_dropped_so_no_agent_wakes_for_it() -> None:
    assert parse(slackbot_notice()) == Drop("slackbot notice")


def test_slackbot_mention_event_is_dropped_too() -> None:
    payload = slackbot_notice(channel="C0ROOM", channel_type="channel")
    payload["event"].update(type="app_mention", text=f"Reminder: <@{BOT_USER}> standup")
    assert parse(payload) == Drop("slackbot notice")


def test_slackbot_notice_in_a2a_room_does_not_reset_the_hop_count(store: Store) -> None:
    guard = BotInboundGuard("dana")
    policy = A2APolicy(
        instance="dana", config=lambda: A2AConfig(frozenset({"C0ROOM"}), 1), ledger=store.hops, scope="room"
    )
    install_a2a_policy(guard, policy)

    def deliver(payload: dict[str, Any]) -> Admitted | Drop:
        # The intake's path: a parse drop never reaches the guard, whose human
        # observer is what resets a room's counts.
        parsed = parse(payload)
        if isinstance(parsed, Drop):
            return parsed
        with store.transaction():
            return guard.decide(parsed)

    def bot_post(ts: str) -> dict[str, Any]:
        event = message(channel="C0ROOM", channel_type="mpim", user="U0ELIBOT", bot_id="B0ELI", ts=ts)
        return envelope(event, authorizations=[authorization()])

    assert isinstance(deliver(bot_post("1700000001.000100")), Admitted)
    assert deliver(bot_post("1700000002.000100")) == Drop("hop limit reached")
    assert deliver(slackbot_notice(channel="C0ROOM", channel_type="mpim")) == Drop("slackbot notice")
    assert deliver(bot_post("1700000003.000100")) == Drop("hop limit reached")


# -- attachments and files -----------------------------------------------------------------------


def forwarded(**attachment: Any) -> dict[str, Any]:
    # A shared (forwarded) message: its content lives in the attachment, `text` is empty.
    base = {
        "is_share": True,
        "is_msg_unfurl": True,
        "author_id": "U0BOB",
        "author_name": "bob",
        "channel_id": "C0OPS",
        "channel_name": "ops",
        "ts": "1699990000.000100",
        "from_url": "https://example.slack.com/archives/C0OPS/p1699990000000100",
        "text": "the build is red on main",
        "fallback": "[November 14th, 2023 7:26 PM] bob: the build is red on main",
    }
    base.update(attachment)
    return {k: v for k, v in base.items() if v is not ...}


def test_forwarded_message_content_reaches_the_agent_quoted_with_its_author() -> None:
    msg = kept(envelope(message(text="", attachments=[forwarded()])))
    assert msg.text == "> [forwarded from bob]\n> the build is red on main"


def test_attachments_follow_the_senders_own_words() -> None:
    msg = kept(envelope(message(text="can you look at this?", attachments=[forwarded()])))
    assert msg.text == "can you look at this?\n> [forwarded from bob]\n> the build is red on main"


def test_integration_post_shows_pretext_title_and_text_but_not_the_fallback() -> None:
    # The legacy "secondary attachment" shape many integrations still post.
    attachment = {
        "fallback": "Deploy #42 failed - https://ci.example.com/42",
        "color": "#ff0000",
        "pretext": "Deploy finished",
        "title": "Deploy #42 failed",
        "title_link": "https://ci.example.com/42",
        "text": "step `migrate` exited 1\nsee logs",
        "footer": "CI",
    }
    event = message(user="U0CIBOT", bot_id="B0CI", subtype=..., text="", attachments=[attachment])
    msg = kept(envelope(event))
    assert msg.text == "> Deploy finished\n> Deploy #42 failed\n> step `migrate` exited 1\n> see logs"


def test_fallback_is_shown_when_an_attachment_has_nothing_else() -> None:
    msg = kept(envelope(message(text="", attachments=[{"fallback": "Required plain-text summary"}])))
    assert msg.text == "> Required plain-text summary"


def test_strings_already_shown_are_not_repeated() -> None:
    attachments = [
        {"fallback": "Build failed", "title": "Build failed", "text": "Build failed"},
        {"title": "Build failed", "text": "job 7"},
    ]
    msg = kept(envelope(message(text="Build failed", attachments=attachments)))
    assert msg.text == "Build failed\n> job 7"


def test_files_are_named_after_the_text() -> None:
    files = [
        {"id": "F0A", "name": "report.pdf", "title": "Q3 report", "mimetype": "application/pdf"},
        {"id": "F0B", "title": "screenshot"},
        {"id": "F0C", "mode": "hidden_by_limit"},
    ]
    msg = kept(envelope(message(subtype="file_share", text="numbers attached", files=files)))
    assert msg.text == "numbers attached\n[file: report.pdf]\n[file: screenshot]\n[file]"


def test_a_file_alone_is_not_an_empty_message() -> None:
    msg = kept(envelope(message(subtype="file_share", text="", files=[{"id": "F0A", "name": "a.png"}])))
    assert msg.text == "[file: a.png]"


def test_a_mention_quoted_in_an_attachment_is_not_a_mention_of_us() -> None:
    attachment = forwarded(text=f"<@{BOT_USER}> please deploy")
    msg = kept(envelope(message(text="fyi <@U0CAROL>", attachments=[attachment])))
    assert msg.mentions == ("U0CAROL",)
    assert f"> <@{BOT_USER}> please deploy" in msg.text  # shown, but not addressed to us


@pytest.mark.parametrize(
    "junk",
    [
        {"attachments": "text"},
        {"attachments": [None, 3, "x", {"text": 5, "title": ["t"], "fallback": None}]},
        {"files": {"name": "x"}},
        {"files": [None, {"name": 3}]},
    ],
)
def test_ill_typed_attachments_and_files_never_cost_the_message(junk: dict[str, Any]) -> None:
    msg = kept(envelope(message(text="hi", **junk)))
    assert msg.text in ("hi", "hi\n[file]")


# -- the room intro ------------------------------------------------------------------------------


def intro_post(**fields: Any) -> dict[str, Any]:
    metadata = {
        "event_type": "nanoslack_room_intro",
        "event_payload": {"opener": "eli", "instances": "eli,dana"},
    }
    event = message(
        channel="C0ROOM",
        channel_type="mpim",
        user="U0ELIBOT",
        bot_id="B0ELI",
        text=f":wave: Welcome <@U0ALICE>! This room is shared with <@U0ELIBOT> (eli), <@{BOT_USER}> (dana).",
        metadata=metadata,
    )
    event.update(fields)
    return envelope(event, authorizations=[authorization()])


def test_room_intro_is_recognised_by_its_message_metadata() -> None:
    msg = kept(intro_post())
    assert msg.intro and msg.is_bot and msg.mentions == ("U0ALICE", "U0ELIBOT", BOT_USER)


@pytest.mark.parametrize(
    "fields",
    [
        {"metadata": ...},
        {"metadata": {"event_type": "task_created", "event_payload": {}}},
        {"metadata": "nanoslack_room_intro"},
        {"bot_id": ..., "user": "U0ALICE"},  # a human cannot attach metadata; never an intro
    ],
    ids=["no metadata", "other event type", "ill-typed metadata", "human author"],
)
def test_other_messages_are_not_intros(fields: dict[str, Any]) -> None:
    payload = intro_post()
    payload["event"] = {k: v for k, v in {**payload["event"], **fields}.items() if v is not ...}
    assert not kept(payload).intro


def test_intro_flag_survives_the_durable_inbox_and_older_payloads_resume_without_it() -> None:
    msg = kept(intro_post())
    assert Inbound.from_payload(msg.to_payload()) == msg
    # Written before the field existed (the version tag, then the fields before it).
    older = json.loads(msg.to_payload())[: 1 + PAYLOAD_FIELDS.index("intro")]
    assert Inbound.from_payload(json.dumps(older)) == dataclasses.replace(msg, intro=False)
