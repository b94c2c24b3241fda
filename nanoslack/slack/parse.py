"""Socket Mode ``events_api`` payload → ``Inbound`` or ``Drop`` (docs/architecture.md).

Pure and total: whatever the payload, the answer is a value, never an exception,
because a malformed payload must never stop an instance (docs/architecture.md). Sender identity comes
only from Slack's structured fields (``user``, ``bot_id``), never from the text.

Whether an event is ours is decided by the installation Slack delivered it to
(``authorizations[0]``), not by the envelope's ``team_id``: in a Slack Connect channel
that is the team hosting the channel, so our own people posting there would look
foreign. Senders from other teams are not dropped here; they meet the gate like any
unknown sender, and ``Inbound.team_id`` carries their team (``user_team``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from nanoslack.inbound import (
    DELETED,
    EDITED,
    Drop,
    FileRef,
    Inbound,
    SessionStop,
    file_label,
    human_sender_id,
    is_dm_channel,
)
from nanoslack.mrkdwn import extract_mentions

__all__ = ["SESSION_STOPPED", "extract_mentions", "is_self", "parse_event", "parse_session_stop"]

# A person clicked the Stop button of one of the app's agent sessions.
SESSION_STOPPED = "agent_session_stopped"

EVENT_TYPES = frozenset({"message", "app_mention"})
REACTION_EVENT = "reaction_added"
# Subtypes that carry a real message someone wrote; everything else (joins, topic changes,
# …) is bookkeeping the agents must not answer. Edits and deletions are read as changes to
# a message (``_parse_change``).
KEPT_SUBTYPES = frozenset({"bot_message", "file_share", "thread_broadcast", "me_message"})
# Slackbot's notices ("You have been removed from #…", reminders) come as a plain
# user message from this id, with no bot_id: not a person and not a peer agent.
SLACKBOT_USER = "USLACKBOT"
# The message metadata ``event_type`` that marks the room intro ``open-a2a-room``
# posts: the fleet keeps it as room context, never as a conversation turn.
ROOM_INTRO_EVENT_TYPE = "nanoslack_room_intro"
# The metadata ``event_type`` of the fleet's own notices (pause, halt, resume, budget):
# room context like the intro, never a hop and never a reason to wake an agent.
NOTICE_EVENT_TYPE = "nanoslack_notice"
# The shapes Slack mints. Anything else in these fields is junk that must not
# become a sender id, a room key or a row in the store.
ID_SHAPES: dict[str, re.Pattern[str]] = {
    "channel": re.compile(r"[CDG][A-Z0-9]{2,31}"),
    "user": re.compile(r"[UWB][A-Z0-9]{2,31}"),
    "bot_id": re.compile(r"B[A-Z0-9]{2,31}"),
    "ts": re.compile(r"\d{1,12}\.\d{1,9}"),
    "thread_ts": re.compile(r"\d{1,12}\.\d{1,9}"),
    "channel_type": re.compile(r"im|mpim|channel|group|app_home"),
}
TEAM_SHAPE = re.compile(r"[TE][A-Z0-9]{2,31}")
_MAX_REASON_VALUE = 64


def parse_event(body: Mapping[str, Any], *, instance: str, team_id: str | None) -> Inbound | Drop:
    try:
        # What Slack sends nearly every time takes the straight path; whatever it
        # does not take (any doubt at all) gets the full checks and their reasons.
        fast = _parse_plain(body, instance, team_id)
        if fast is not None:
            return fast
        return _parse(body, instance=instance, team_id=team_id)
    except Exception as exc:  # noqa: BLE001 — totality is the contract; the reason names the bug
        return Drop(f"malformed payload: {type(exc).__name__}")


def parse_session_stop(event: Mapping[str, Any]) -> SessionStop | Drop:
    """``agent_session_stopped`` (``channel``, ``thread_ts``, ``user``,
    ``streaming_message_ts``) → ``SessionStop``; total like ``parse_event``."""
    fields: dict[str, str] = {}
    for key, shape in (("channel", "channel"), ("thread_ts", "thread_ts"), ("user", "user")):
        value = event.get(key)
        if not isinstance(value, str) or not ID_SHAPES[shape].fullmatch(value):
            return Drop(f"agent_session_stopped without a valid {key}")
        fields[key] = value
    streams = event.get("streaming_message_ts")
    stopped = tuple(
        ts
        for ts in (streams if isinstance(streams, list) else [])
        if isinstance(ts, str) and ID_SHAPES["ts"].fullmatch(ts)
    )
    return SessionStop(fields["channel"], fields["thread_ts"], fields["user"], stopped)


def is_self(msg: Inbound, *, bot_user_id: str | None, bot_id: str | None) -> bool:
    """The instance's own post, echoed back by Slack (both ids come from ``auth.test``)."""
    return bool(bot_user_id and msg.user == bot_user_id) or bool(bot_id and msg.bot_id == bot_id)


def _clip(value: object) -> str:
    return str(value)[:_MAX_REASON_VALUE]


def _opt_str(event: Mapping[str, Any], key: str) -> str | None | Drop:
    """``None`` when absent/null/empty, the string when present, a ``Drop`` when ill-typed."""
    value = event.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return Drop(f"ill-typed {key}")
    shape = ID_SHAPES.get(key)
    if shape is not None and not shape.fullmatch(value):
        return Drop(f"malformed {key}")
    return value


def _id_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _installation(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(team, enterprise) of the installation the event was delivered to."""
    auths = body.get("authorizations")
    if isinstance(auths, list) and auths and isinstance(auths[0], Mapping):
        # bolt-python reads authorizations[0] first for the same reason: in shared
        # channels the envelope names the host team, not the receiving installation.
        auth = auths[0]
        return _id_or_none(auth.get("team_id")), _id_or_none(auth.get("enterprise_id"))
    return _id_or_none(body.get("team_id")), _id_or_none(body.get("enterprise_id"))


def _is_ours(body: Mapping[str, Any], team_id: str | None) -> bool:
    named = [i for i in _installation(body) if i is not None]
    # Our auth.test team_id is the workspace for a workspace install and the org for
    # an org-wide one, so either id of the installation may be the one that matches.
    return team_id is None or not named or team_id in named


def _sender_team(body: Mapping[str, Any], event: Mapping[str, Any], team_id: str | None) -> str | None:
    """The author's team: Slack's ``user_team`` (set in shared channels), else ``team``."""
    for value in (event.get("user_team"), event.get("team")):
        # An org (E…) stands in for the team when the author is on an Enterprise Grid.
        if isinstance(value, str) and TEAM_SHAPE.fullmatch(value):
            return value
    return _installation(body)[0] or team_id


def _envelope_checks(body: object, team_id: str | None) -> Mapping[str, Any] | Drop:
    if not isinstance(body, Mapping):
        return Drop("payload is not an object")
    if body.get("type") != "event_callback":
        return Drop(f"not an event_callback: {_clip(body.get('type'))}")
    event = body.get("event")
    if not isinstance(event, Mapping):
        return Drop("no event in payload")
    if not _is_ours(body, team_id):
        return Drop("event from another team")
    return event


def _event_checks(event: Mapping[str, Any]) -> str | None | Drop:
    """The subtype, or why the event is not a message we keep."""
    event_type = event.get("type")
    if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
        return Drop(f"event type ignored: {_clip(event_type)}")
    subtype = event.get("subtype")
    if subtype is None:
        return None
    if not isinstance(subtype, str):
        return Drop("ill-typed subtype")
    if subtype not in KEPT_SUBTYPES:
        return Drop(f"subtype ignored: {_clip(subtype)}")
    return subtype


def _bot_name(event: Mapping[str, Any]) -> str | None:
    profile = event.get("bot_profile")
    name = profile.get("name") if isinstance(profile, Mapping) else None
    if isinstance(name, str) and name:
        return name
    username = event.get("username")
    return username if isinstance(username, str) and username else None


def _strings(item: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [v.strip() for v in (item.get(k) for k in keys) if isinstance(v, str) and v.strip()]


def _attachment_lines(attachment: Mapping[str, Any]) -> list[str]:
    lines = _strings(attachment, ("pretext", "title", "text"))
    # fallback is Slack's plain-text summary of the rest: noise when the rest is there.
    return lines or _strings(attachment, ("fallback",))


def _forwarded_from(attachment: Mapping[str, Any]) -> list[str]:
    """A header naming a forwarded message's author: who said it matters to the agent."""
    if not (attachment.get("is_share") or attachment.get("is_msg_unfurl")):
        return []
    return [f"[forwarded from {name}]" for name in _strings(attachment, ("author_name",))[:1]]


def _quote(lines: list[str]) -> str:
    return "\n".join(f"> {row}" for line in lines for row in line.splitlines())


def _file_name(file: Mapping[str, Any]) -> str:
    names = _strings(file, ("name", "title"))
    return names[0] if names else ""


# Slack sends at most 10 files a message; more than this is junk not worth a payload.
_MAX_FILE_REFS = 16


def _file_ref(file: Mapping[str, Any]) -> FileRef:
    """A ``files[]`` entry as the turn needs it. Whatever is missing or ill-typed is empty:
    the turn says the file cannot be had (docs/agents.md), the message is never dropped."""

    def text(key: str) -> str:
        value = file.get(key)
        return value if isinstance(value, str) else ""

    size = file.get("size")
    url = text("url_private_download") or text("url_private")
    return FileRef(
        id=text("id"),
        name=_file_name(file),
        mimetype=text("mimetype"),
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
        url=url,
        access=text("file_access"),
    )


def _files(event: Mapping[str, Any]) -> tuple[FileRef, ...]:
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    return tuple(_file_ref(f) for f in files[:_MAX_FILE_REFS] if isinstance(f, Mapping))


def _with_attachments(text: str, event: Mapping[str, Any]) -> str:
    """The message's own text, then what its attachments and files say.

    Forwarded messages and many integrations' posts carry their content only in
    ``attachments``; without it the agent would see an empty message. Attachment
    lines are quoted (``> ``) so they never read as the sender's own words, and a
    string already shown (often ``text`` repeated as an attachment) is not repeated.
    """
    seen = {text.strip()}
    parts = [text] if text else []
    attachments = event.get("attachments")
    for attachment in attachments if isinstance(attachments, list) else ():
        if not isinstance(attachment, Mapping):
            continue
        fresh = [line for line in dict.fromkeys(_attachment_lines(attachment)) if line not in seen]
        seen.update(fresh)
        if fresh:
            parts.append(_quote(_forwarded_from(attachment) + fresh))
    files = event.get("files")
    for file in files if isinstance(files, list) else ():
        if isinstance(file, Mapping):
            parts.append(file_label(_file_name(file)))
    return "\n".join(parts)


def _metadata_type(event: Mapping[str, Any]) -> str | None:
    metadata = event.get("metadata")
    kind = metadata.get("event_type") if isinstance(metadata, Mapping) else None
    return kind if isinstance(kind, str) else None


def _parse_reaction(body: Mapping[str, Any], event: Mapping[str, Any], *, instance: str) -> Inbound | Drop:
    """A reaction to a message (an owner's 🛑 halts a room): kept for room control only."""
    item = event.get("item")
    if not isinstance(item, Mapping) or item.get("type") != "message":
        return Drop("reaction to something other than a message")
    reaction = event.get("reaction")
    if not isinstance(reaction, str) or not reaction:
        return Drop("reaction without a name")
    fields: dict[str, str] = {}
    # The event's own ts (event_ts) keys it in the inbox; the message's is item.ts.
    for key, value in (
        ("channel", _opt_str(item, "channel")),
        ("ts", _opt_str({"ts": event.get("event_ts")}, "ts")),
        ("user", _opt_str(event, "user")),
        ("item_ts", _opt_str(item, "ts")),
    ):
        if isinstance(value, Drop):
            return value
        if value is None:
            return Drop(f"reaction without {key}")
        fields[key] = value
    event_id = body.get("event_id")
    return Inbound(
        instance=instance,
        team_id=_installation(body)[0],
        channel=fields["channel"],
        # A reaction carries no channel_type: an IM is told by its id.
        channel_type="im" if is_dm_channel(fields["channel"]) else None,
        ts=fields["ts"],
        thread_ts=None,
        user=fields["user"],
        bot_id=None,
        text="",
        mentions=(),
        event_type=REACTION_EVENT,
        event_id=event_id if isinstance(event_id, str) else None,
        sender_id=human_sender_id(fields["user"]),
        reaction=reaction,
        item_ts=fields["item_ts"],
    )


# How many values each of ``_shape``'s checks remembers before it forgets them all.
_SHAPE_BOUND = 8192


def _shape(pattern: re.Pattern[str]) -> Callable[[object], Any]:
    """One of ``ID_SHAPES`` for the straight path, remembering the values it passed: a
    room's id, its people's and even a message's ts come again in every instance's
    envelope (a set lookup instead of a regex). Forgets everything past a bound. A
    closure, not an object with ``__call__``: six calls per envelope, and a plain
    function's call costs less.

    The check answers as ``_opt_str`` does: None (absent, null, empty), the string, or
    ``_DOUBT``."""
    fullmatch = pattern.fullmatch
    passed: set[str] = set()

    def check(value: object) -> Any:
        if value is None or value == "":
            return None
        if type(value) is not str:
            return _DOUBT
        if value in passed:
            return value
        if not fullmatch(value):
            return _DOUBT
        if len(passed) >= _SHAPE_BOUND:
            passed.clear()
        passed.add(value)
        return value

    return check


# Not a usable value for the straight path: the full checks decide.
_DOUBT = object()
_CHANNEL, _USER, _BOT_ID, _TS, _CHANNEL_TYPE = (
    _shape(ID_SHAPES[key]) for key in ("channel", "user", "bot_id", "ts", "channel_type")
)
_TEAM = TEAM_SHAPE.fullmatch
# A message's mentions, by its text: every instance in the room reads the same text.
_MENTIONS: dict[str, tuple[str, ...]] = {}
_MENTIONS_BOUND = 2048


def _mentions(text: str) -> tuple[str, ...]:
    if "<@" not in text:
        return ()
    found = _MENTIONS.get(text)
    if found is None:
        if len(_MENTIONS) >= _MENTIONS_BOUND:
            _MENTIONS.clear()
        found = _MENTIONS[text] = extract_mentions(text)
    return found


def _parse_plain(body: object, instance: str, team_id: str | None) -> Inbound | None:
    """A ``message``/``app_mention`` that passes every check of ``_parse``, built as
    ``_parse`` builds it; None for anything else (then ``_parse`` decides, and says why).

    The same checks, in plain dicts and strings (what a decoded frame holds) and
    without a ``Drop`` per field: ``_parse`` is the reference, and a test holds the two
    to the same answer on arbitrary payloads."""
    if type(body) is not dict or body.get("type") != "event_callback":
        return None
    event = body.get("event")
    if type(event) is not dict:
        return None
    event_type = event.get("type")
    if event_type != "message" and event_type != "app_mention":
        return None
    subtype = event.get("subtype")
    if subtype is not None and (type(subtype) is not str or subtype not in KEPT_SUBTYPES):
        return None
    auths = body.get("authorizations")
    if type(auths) is list and auths:
        auth = auths[0]
        if type(auth) is not dict:
            return None
    else:
        auth = body
    installed = auth.get("team_id")
    enterprise = auth.get("enterprise_id")
    installed = installed if type(installed) is str and installed else None
    enterprise = enterprise if type(enterprise) is str and enterprise else None
    if team_id is not None and (installed is not None or enterprise is not None):
        if team_id != installed and team_id != enterprise:
            return None
    get = event.get
    channel = _CHANNEL(get("channel"))
    ts = _TS(get("ts"))
    thread_ts = _TS(get("thread_ts"))
    user = _USER(get("user"))
    bot_id = _BOT_ID(get("bot_id"))
    channel_type = _CHANNEL_TYPE(get("channel_type"))
    if channel is None or ts is None or _DOUBT in (channel, ts, thread_ts, user, bot_id, channel_type):
        return None
    text = get("text", "")
    if text is None:
        text = ""
    elif type(text) is not str:
        return None
    if (bot_id is None and (user is None or subtype == "bot_message")) or user == SLACKBOT_USER:
        return None
    sender_team = installed or team_id
    for value in (get("user_team"), get("team")):
        if type(value) is str and _TEAM(value):
            sender_team = value
            break
    event_id = body.get("event_id")
    bot = bot_id is not None
    metadata = _metadata_type(event) if bot else None
    return Inbound(
        instance=instance,
        team_id=sender_team,
        channel=channel,
        channel_type=None if event_type == "app_mention" else channel_type,
        ts=ts,
        thread_ts=thread_ts,
        user=user,
        bot_id=bot_id,
        text=_with_attachments(text, event) if "attachments" in event or "files" in event else text,
        mentions=_mentions(text),
        event_type=event_type,
        subtype=subtype,
        event_id=event_id if type(event_id) is str else None,
        sender_id="" if bot else human_sender_id(user),
        bot_name=_bot_name(event) if bot else None,
        intro=metadata == ROOM_INTRO_EVENT_TYPE,
        notice=metadata == NOTICE_EVENT_TYPE,
        files=_files(event) if "files" in event else (),
    )


def _parse(body: Mapping[str, Any], *, instance: str, team_id: str | None) -> Inbound | Drop:
    event = _envelope_checks(body, team_id)
    if isinstance(event, Drop):
        return event
    if event.get("type") == REACTION_EVENT:
        return _parse_reaction(body, event, instance=instance)
    if event.get("type") == "message" and event.get("subtype") in (EDITED, DELETED):
        return _parse_change(body, event, instance=instance, team_id=team_id)
    subtype = _event_checks(event)
    if isinstance(subtype, Drop):
        return subtype
    fields: dict[str, str | None] = {}
    for key in ("channel", "ts", "thread_ts", "user", "bot_id", "channel_type"):
        value = _opt_str(event, key)
        if isinstance(value, Drop):
            return value
        fields[key] = value
    channel, ts, user, bot_id = fields["channel"], fields["ts"], fields["user"], fields["bot_id"]
    if channel is None:
        return Drop("missing channel")
    if ts is None:
        return Drop("missing ts")
    text = event.get("text", "")
    if text is None:
        text = ""
    if not isinstance(text, str):
        return Drop("text is not a string")
    if subtype == "bot_message" and bot_id is None:
        return Drop("bot message without bot_id")
    if bot_id is None and user is None:
        return Drop("human message without user")
    if user == SLACKBOT_USER:
        return Drop("slackbot notice")
    event_id = body.get("event_id")
    event_type = str(event["type"])
    return Inbound(
        instance=instance,
        team_id=_sender_team(body, event, team_id),
        channel=channel,
        channel_type=None if event_type == "app_mention" else fields["channel_type"],
        ts=ts,
        thread_ts=fields["thread_ts"],
        user=user,
        bot_id=bot_id,
        text=_with_attachments(text, event),
        # Only the author's own words can address us: a forwarded message or an
        # integration quoting <@U…> in an attachment is not a mention.
        mentions=extract_mentions(text),
        event_type=event_type,
        subtype=subtype,
        event_id=event_id if isinstance(event_id, str) else None,
        # Bots get their sender id only from the guard's admission (docs/architecture.md).
        sender_id="" if bot_id is not None else human_sender_id(str(user)),
        bot_name=_bot_name(event) if bot_id is not None else None,
        # Only an app can attach metadata; a human-authored message is never an intro.
        intro=bot_id is not None and _metadata_type(event) == ROOM_INTRO_EVENT_TYPE,
        notice=bot_id is not None and _metadata_type(event) == NOTICE_EVENT_TYPE,
        files=_files(event),
    )


def _parse_change(
    body: Mapping[str, Any], event: Mapping[str, Any], *, instance: str, team_id: str | None
) -> Inbound | Drop:
    """An edit (``message_changed``: ``message`` the new one with its original ``ts``,
    ``previous_message`` the old) or a deletion (``message_deleted``: ``deleted_ts``,
    ``previous_message``) of a message (docs/agents.md, "Edits and deletes"). Neither has
    a ``user`` at the top level: the author is the changed message's. ``ts`` is the
    event's own (each edit has its own: a redelivery of it is a duplicate in the inbox),
    ``item_ts`` the changed message's."""
    subtype = str(event["subtype"])
    edited = subtype == EDITED
    inner = event.get("message") if edited else event.get("previous_message")
    if not isinstance(inner, Mapping):
        return Drop(f"{subtype} without {'message' if edited else 'previous_message'}")
    previous = event.get("previous_message")
    previous = previous if isinstance(previous, Mapping) else {}
    fields: dict[str, str | None] = {}
    for key, source, name in (
        ("channel", event, "channel"),
        ("channel_type", event, "channel_type"),
        ("ts", {"ts": event.get("ts") or event.get("event_ts")}, "ts"),
        ("item_ts", {"ts": inner.get("ts") if edited else event.get("deleted_ts")}, "ts"),
        ("thread_ts", inner, "thread_ts"),
        ("user", inner, "user"),
        ("bot_id", inner, "bot_id"),
    ):
        value = _opt_str(source, name)
        if isinstance(value, Drop):
            return Drop(f"{subtype}: {value.reason}")
        fields[key] = value
    for key in ("channel", "ts", "item_ts"):
        if fields[key] is None:
            return Drop(f"{subtype} without {key}")
    user, bot_id = fields["user"], fields["bot_id"]
    if bot_id is None and user is None:
        return Drop(f"{subtype} without its author")
    if user == SLACKBOT_USER:
        return Drop("slackbot notice")
    text = inner.get("text") if edited else ""
    old = previous.get("text")
    if not isinstance(text, str) or (old is not None and not isinstance(old, str)):
        return Drop(f"{subtype}: text is not a string")
    if edited and old is not None and text == old:
        # An unfurl, a language tag, a thread summary: Slack says "changed", the words did not.
        return Drop("edit without a change of text")
    event_id = body.get("event_id")
    return Inbound(
        instance=instance,
        team_id=_sender_team(body, inner, team_id),
        channel=str(fields["channel"]),
        channel_type=fields["channel_type"],
        ts=str(fields["ts"]),
        thread_ts=fields["thread_ts"],
        user=user,
        bot_id=bot_id,
        text=_with_attachments(text, inner) if edited else "",
        mentions=extract_mentions(text),
        event_type="message",
        subtype=subtype,
        event_id=event_id if isinstance(event_id, str) else None,
        sender_id="" if bot_id is not None else human_sender_id(str(user)),
        bot_name=_bot_name(inner) if bot_id is not None else None,
        item_ts=fields["item_ts"],
        previous_mentions=extract_mentions(old or ""),
    )
