"""The value types every pipeline stage shares: who an instance is, the message it
heard, the thread a turn answers, a person's click on a room feature's button, and a
stage's refusal.

Pure data: no Slack client, no bolt, no SQL. The Slack edge builds an ``Inbound``
from an event payload (``nanoslack.slack.parse``); the guard may re-attribute it
(``with_sender``); the router and gate read it. The one rule for a sender's id
(``Inbound.sender``) lives here so every stage names a sender the same way.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from nanoslack.frozen import quick_init


class InboxKey(NamedTuple):
    """Identity of one Slack message as seen by one instance.

    ``message`` and its ``app_mention`` twin share it, so does every Slack retry.
    """

    instance: str
    channel: str
    ts: str


# Slack's subtypes for a person or an app changing a message already posted (docs/agents.md,
# "Edits and deletes"): not a new message, a change to the one named by ``Inbound.item_ts``.
EDITED = "message_changed"
DELETED = "message_deleted"

# The sender of what the fleet itself tells an agent (a round's closing brief).
FLEET_SENDER = "slack:fleet"


def human_sender_id(user_id: str) -> str:
    return f"slack:{user_id}"


def bot_sender_id(bot_id: str) -> str:
    return f"slack:bot:{bot_id}"


def platform_id(channel: str) -> str:
    return f"slack:{channel}"


def is_dm_channel(channel: str) -> bool:
    """A one-to-one DM: Slack's IM ids begin with ``D``, and only theirs (a group DM's with
    ``G`` or ``C``). For places that have the id and no ``channel_type`` (a reaction, a row)."""
    return channel.startswith("D")


class FileRef(NamedTuple):
    """One file a message carries (``files[]``; docs/agents.md "Files"), as Slack described
    it: what the turn that answers the message downloads and shows. A NamedTuple: it goes
    into the durable inbox payload as a plain list."""

    id: str
    name: str
    mimetype: str
    size: int  # bytes, as Slack says (0: not said)
    url: str  # ``url_private_download`` (else ``url_private``); "" when the event had none
    # Slack's ``file_access``: "check_file_info" means only the id came (``files.info`` first).
    access: str = ""

    @property
    def label(self) -> str:
        """The words the message's text carries for it (``[file: name]``)."""
        return file_label(self.name)


def file_label(name: str) -> str:
    return f"[file: {name}]" if name else "[file]"


# What a message the fleet wrote says in place of a file it passed on whose share was since
# deleted (docs/agents.md, "Edits and deletes"): the words of a file Slack says is gone.
FILE_GONE = "the file is gone (deleted, or no longer shared)"


def file_gone_label(name: str) -> str:
    return f"[file: {name or 'unnamed'}: {FILE_GONE}]"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an instance is on Slack, from ``auth.test``."""

    instance: str
    team_id: str | None
    bot_user_id: str
    bot_id: str | None
    name: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Inbound:
    instance: str
    team_id: str | None
    channel: str
    # "im", "mpim", "channel", "group"; None when Slack omitted it (app_mention).
    channel_type: str | None
    ts: str
    thread_ts: str | None
    # Slack user id of the author: a human's U…/W…, or a modern bot's *bot user* id.
    user: str | None
    # Present iff the message is bot-authored (Slack's field, never the text).
    bot_id: str | None
    text: str
    # User ids named by <@U…> tokens in the text, in order, without duplicates.
    mentions: tuple[str, ...]
    event_type: str  # "message" or "app_mention"
    subtype: str | None = None
    event_id: str | None = None
    # Who the pipeline says sent it: "slack:U…" for humans; "slack:bot:B…" once
    # the guard admitted a bot message; "" for a bot message not yet admitted.
    sender_id: str = ""
    # Bot display name carried by the event (bot_profile.name), if any.
    bot_name: str | None = None
    # Set by the A2A policy on an admitted bot message: which consecutive hop
    # this is (1-based) and the budget; 0 for humans.
    hop: int = 0
    hop_limit: int = 0
    # The room intro open-a2a-room posted (its message metadata says so): room
    # context only, never a hop, an engagement, an approval request or a turn.
    intro: bool = False
    # A ``reaction_added`` event (``event_type``): the emoji name, and the ts of the
    # message it was added to; ``ts`` is then the event's own ``event_ts``.
    reaction: str | None = None
    item_ts: str | None = None
    # One of the fleet's own notices (pause, halt, resume, budget; its metadata says so):
    # room context like the intro, never a hop, never a reason to wake an agent.
    notice: bool = False
    # The files it carries (``file_share`` messages, bots' posts), at most 8: docs/agents.md.
    files: tuple[FileRef, ...] = ()
    # An edit (``subtype`` ``message_changed``): who the text named before it, so that only
    # a mention the edit adds wakes anyone (docs/agents.md, "Edits and deletes"). An edit
    # or a deletion names the message it changed in ``item_ts``; ``ts`` is the event's own.
    previous_mentions: tuple[str, ...] = ()

    @property
    def key(self) -> InboxKey:
        return InboxKey(self.instance, self.channel, self.ts)

    @property
    def is_bot(self) -> bool:
        return self.bot_id is not None

    @property
    def is_change(self) -> bool:
        """An edit or a deletion of the message ``item_ts``, not a message of its own."""
        return self.subtype == EDITED or self.subtype == DELETED

    @property
    def newly_named(self) -> tuple[str, ...]:
        """The users an edit names that its message did not name before."""
        return tuple(u for u in self.mentions if u not in self.previous_mentions)

    @property
    def is_dm(self) -> bool:
        return self.channel_type == "im"

    @property
    def thread_key(self) -> str | None:
        """The thread a reply belongs to: the parent ts in groups, None in DMs."""
        if self.channel_type == "im":  # ``is_dm``, without a second property call per message
            return None
        return self.thread_ts or self.ts

    @property
    def sender(self) -> str:
        """The sender's ``users.id``: what the guard set, else what Slack's fields say.

        A bot message the guard has not admitted yet gets the id it would be admitted
        as (``slack:bot:<bot_id>``, docs/architecture.md), never its bot *user* id: one sender, one id,
        whichever stage asks (name lookup, router, gate).
        """
        if self.sender_id:
            return self.sender_id
        if self.bot_id:
            return bot_sender_id(self.bot_id)
        return human_sender_id(self.user) if self.user else ""

    @property
    def from_fleet(self) -> bool:
        """The fleet explaining the room (the intro, a notice), not a turn in a conversation."""
        return self.intro or self.notice

    @property
    def platform_id(self) -> str:
        return platform_id(self.channel)

    @property
    def wrapping_up(self) -> bool:
        """True when this admitted hop is the last the budget allows (the wrapping-up cue, docs/agents.md)."""
        return self.hop_limit > 0 and self.hop >= self.hop_limit

    def mentions_user(self, user_id: str | None) -> bool:
        return user_id is not None and user_id in self.mentions

    def with_sender(self, sender_id: str) -> Inbound:
        return dataclasses.replace(self, sender_id=sender_id)

    def to_payload(self) -> str:
        """Compact JSON for the durable inbox: ``[version, values…]`` in the order
        of ``PAYLOAD_FIELDS``. Written once per envelope before the ack, so it is
        a list, not an object (half the encoding time), by orjson (a tenth of the
        standard encoder's); text it refuses (a lone surrogate) takes the standard one."""
        values = [PAYLOAD_VERSION, *_payload_values(self)]
        if self.files:  # orjson takes no NamedTuple: the files as plain lists
            values[_FILES_AT] = [list(f) for f in self.files]
        try:
            return orjson.dumps(values).decode()
        except TypeError:
            return _ENCODER.encode(values)

    @classmethod
    def from_payload(cls, text: str) -> Inbound:
        data = json.loads(text)
        if isinstance(data, list) and data and data[0] == PAYLOAD_VERSION:
            values = dict(zip(PAYLOAD_FIELDS, data[1:], strict=False))
        elif isinstance(data, dict):  # the object form an earlier build wrote
            values = {k: v for k, v in data.items() if k in PAYLOAD_FIELDS}
        else:
            raise ValueError(f"unknown inbox payload format: {text[:40]!r}")
        values["mentions"] = tuple(values.get("mentions") or ())
        values["files"] = tuple(FileRef(*f) for f in values.get("files") or ())
        values["previous_mentions"] = tuple(values.get("previous_mentions") or ())
        return cls(**values)


# The payload layout is frozen per version: add a field by bumping the version and
# reading the old layout, never by reordering this tuple.
PAYLOAD_VERSION = 1
PAYLOAD_FIELDS = (
    "instance", "team_id", "channel", "channel_type", "ts", "thread_ts", "user", "bot_id", "text",
    "mentions", "event_type", "subtype", "event_id", "sender_id", "bot_name", "hop", "hop_limit",
    # Appended with a default: a shorter version-1 payload still reads (the default fills in).
    "intro", "reaction", "item_ts", "notice", "files", "previous_mentions",
)  # fmt: skip
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_FILES_AT = 1 + PAYLOAD_FIELDS.index("files")  # in the payload, after its version
_payload_values = operator.attrgetter(*PAYLOAD_FIELDS)  # one C call for every field


@dataclass(frozen=True, slots=True)
class ThreadKey:
    """One conversation thread of an instance's turns: one turn at a time in each."""

    channel: str
    thread_key: str  # "" in DMs


@dataclass(frozen=True, slots=True)
class FeatureClick:
    """A person's click on one of a room feature's buttons (a vote's option), as the edge
    parses it: the item the buttons belong to (a vote's id), the option's index, and who
    clicked. The click router offers it to every room feature (``RoomFeature.click``)."""

    item: int
    option: int
    by_user: str  # the clicking Slack user (U…)


@dataclass(frozen=True, slots=True)
class SessionStop:
    """A person's click on the Stop button of an agent session (Slack's
    ``agent_session_stopped``, docs/agent-surface.md), as the edge parses it: the thread
    whose turn is to stop, who clicked, and the streams Slack stopped already."""

    channel: str
    thread_ts: str
    by_user: str
    streams: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FeedbackClick:
    """A person's 👍 or 👎 on a turn's reply (Slack's ``feedback_buttons``)."""

    turn_id: int
    value: str  # "positive" | "negative"
    by_user: str


@dataclass(frozen=True, slots=True)
class Drop:
    """A stage's refusal, with the reason operators will grep for."""

    reason: str
