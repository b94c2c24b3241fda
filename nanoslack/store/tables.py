"""Every table nanoslack keeps, in one place (docs/data.md), each declared once as the
class of its rows (``schema.table``): its fields are the table's columns, in order, and
the repositories select, read and insert those same fields (``rows.Row``), so a column
is named and typed here and nowhere else. A listing that joins another table's columns
extends the row class with them.

A new column is a field here (its place among the fields is its place in a fresh
database) and, for databases made before it, a migration that adds it
(``migrations``). Fields carry no Python default: a column's default is the database's
(``Col(server_default=…)``), and a row is always read whole.

Names that operators use in SQL (``messaging_groups``, ``users``, ``agent_groups``,
``agent_group_members``, ``pending_sender_approvals`` and their documented columns)
are fixed; the rest is ours. Times are Unix seconds (REAL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from sqlalchemy import Index, UniqueConstraint, text

from nanoslack.inbound import FLEET_SENDER, InboxKey
from nanoslack.store.schema import METADATA as METADATA
from nanoslack.store.schema import Col, table

# A column that holds a list as text (a comma list, a JSON list), read as a tuple.
_TEXT_LIST = Col(stored=str)
_TEXT_LIST_OR_NULL = Col(stored=str | None)


@table("schema_meta", key=("key",))
@dataclass(frozen=True, slots=True)
class SchemaMeta:
    key: str
    value: str


@table(
    "inbox",
    key=("instance", "channel", "ts"),
    constraints=(Index("inbox_unfinished", "instance", sqlite_where=text("status = 'received'")),),
)
@dataclass(frozen=True, slots=True)
class InboxEntry:
    """Durable inbox (docs/architecture.md): one row per (instance, channel, ts), written before the ack."""

    instance: str
    channel: str
    ts: str
    event_type: str
    event_id: str | None
    payload: str  # Inbound as JSON, so a restart can resume it
    status: str  # received | done | dropped | failed
    reason: str | None
    attempts: int
    received_at: float
    finished_at: float | None


@table("a2a_hops", key=("room", "instance", "ts"))
@dataclass(frozen=True, slots=True)
class A2AHop:
    """One admitted bot message (a hop) held by one instance in one room (docs/architecture.md).

    A row per (room, instance, ts) makes a reservation idempotent across a crash
    and lets ``room`` scope count distinct messages across the fleet.
    """

    room: str
    instance: str
    ts: str
    bot_id: str
    created_at: float


@table(
    "messaging_groups",
    key=("id",),
    constraints=(UniqueConstraint("platform", "platform_id", "instance"),),
)
@dataclass(frozen=True, slots=True)
class GroupRow:
    id: int
    platform: str  # slack
    platform_id: str  # slack:<conversation id>
    instance: str
    kind: str  # dm | group
    name: str | None
    engage_mode: str  # pattern | mention | mention-sticky
    engage_pattern: str | None
    unknown_sender_policy: str  # public | request_approval | strict | decline_notify
    created_at: float

    @property
    def is_dm(self) -> bool:
        return self.kind == "dm"

    @property
    def channel(self) -> str:
        """The Slack conversation id inside ``slack:<id>``."""
        return self.platform_id.split(":", 1)[1] if ":" in self.platform_id else self.platform_id


@table("users", key=("id",))
@dataclass(frozen=True, slots=True)
class UserRow:
    id: str  # slack:U… or slack:bot:B…
    kind: str  # human | bot
    display_name: str | None
    slack_user_id: str | None  # the U… of a human, or a bot's bot user
    created_at: float
    updated_at: float

    @property
    def label(self) -> str:
        """How operators and owners see this sender: name and id."""
        return f"{self.display_name} ({self.id})" if self.display_name else self.id


@table("agent_groups", key=("id",))
@dataclass(frozen=True, slots=True)
class AgentGroupRow:
    id: int
    instance: Annotated[str, Col(unique=True)]
    name: str
    created_at: float


@table("agent_group_members", key=("agent_group_id", "user_id"))
@dataclass(frozen=True, slots=True)
class AgentGroupMember:
    agent_group_id: Annotated[int, Col(foreign_key="agent_groups.id")]
    user_id: str
    role: str  # member | admin
    added_at: float
    added_by: str | None


@table("engaged_threads", key=("messaging_group_id", "thread_key"))
@dataclass(frozen=True, slots=True)
class EngagedThread:
    """Where an instance is engaged (mention-sticky, docs/architecture.md): one row per thread."""

    messaging_group_id: Annotated[int, Col(foreign_key="messaging_groups.id")]
    thread_key: str
    engaged_at: float


@table(
    "messages",
    key=("instance", "channel", "ts"),
    constraints=(
        Index("messages_pending", "instance", "thread_key", sqlite_where=text("status = 'pending'")),
        Index("messages_by_group", "messaging_group_id", "ts"),
        Index("messages_held", "instance", "sender_id", sqlite_where=text("status = 'held'")),
    ),
)
@dataclass(frozen=True, slots=True)
class MessageRow:
    """Every message that passed the guard, as one instance saw it.

    ``status``: ``context`` (not engaged: room context for later turns), ``pending``
    (engaged and allowed: waiting for a turn), ``held`` (waiting for an approval),
    ``refused`` (the gate said no), ``done`` (a turn consumed it), ``deleted`` (its author
    deleted it: ``text`` is empty, the row keeps its place in the thread; docs/agents.md),
    ``waiting`` (a routine's handoff before the run's post has its ts: ``HandoffRow.waits_on``).
    """

    instance: str
    channel: str
    ts: str
    thread_key: str  # "" in DMs
    messaging_group_id: int | None
    sender_id: str
    text: str
    status: str
    hop: int
    hop_limit: int
    # A message another instance handed over (``send_to_agent``): how many handoffs led
    # here (0: a Slack message).
    handoff_depth: Annotated[int, Col(server_default="0")]
    created_at: float
    # An edit made after a turn had shown the message (docs/agents.md, "Edits and deletes"):
    # the edited message's ts; this row (at the edit's own ts) is its new text.
    edit_of: str | None = None

    @property
    def key(self) -> InboxKey:
        return InboxKey(self.instance, self.channel, self.ts)

    @property
    def internal(self) -> bool:
        """Written by the fleet, not heard in Slack: a handoff, a round's closing brief."""
        return self.handoff_depth > 0 or self.sender_id == FLEET_SENDER


@table(
    "pending_sender_approvals",
    key=("id",),
    constraints=(UniqueConstraint("agent_group_id", "sender_id"),),
)
@dataclass(frozen=True, slots=True)
class SenderApproval:
    """One approval question per (agent group, sender), whatever the number of messages."""

    id: int
    agent_group_id: Annotated[int, Col(foreign_key="agent_groups.id")]
    messaging_group_id: Annotated[int, Col(foreign_key="messaging_groups.id")]
    sender_id: str
    status: str  # pending | approved | denied
    owner_id: str | None
    request_channel: str | None
    request_ts: str | None
    created_at: float
    decided_at: float | None
    decided_by: str | None


@dataclass(frozen=True, slots=True)
class ApprovalRow(SenderApproval):
    """An approval as listed: with its instance and the room its first held message came from."""

    instance: str
    platform_id: str | None


@table("sender_refusals", key=("messaging_group_id", "sender_id", "reason"))
@dataclass(frozen=True, slots=True)
class SenderRefusal:
    """Audit of gate refusals (docs/architecture.md): counted, with first and last sighting."""

    messaging_group_id: Annotated[int, Col(foreign_key="messaging_groups.id")]
    sender_id: str
    reason: str
    instance: str
    count: Annotated[int, Col(server_default="0")]
    first_seen: float
    last_seen: float
    # When the sender was last told no (decline_notify), so a chatty sender gets one
    # notice per day, not one per message.
    notified_at: float | None


@dataclass(frozen=True, slots=True)
class RefusalRow(SenderRefusal):
    """A refusal as listed: with the room's ``platform_id``."""

    platform_id: str | None


@table(
    "outbox",
    key=("id",),
    constraints=(Index("outbox_queued", "instance", sqlite_where=text("status = 'queued'")),),
)
@dataclass(frozen=True, slots=True)
class OutboxRow:
    """Posts to make, written in the same transaction as the decision behind them.

    ``dedupe_key`` makes a post happen once even across a crash; a poster sends
    rows in ``queued`` state and records Slack's ts.
    """

    id: int
    instance: str
    dedupe_key: Annotated[str, Col(unique=True)]
    # post | update | reaction (a turn's ``react``: ``text`` the emoji name, ``update_ts`` the
    # message it goes on) | file (a turn's ``send_file``: ``text`` the comment that introduces
    # it, the file in ``outbox_files``; once sent, ``posted_ts`` is the file's id: Slack
    # shares a file after answering and does not say the ts of the message that shares it)
    kind: str
    # What the row is, so nobody reads it off the key: reply (a turn's post), notice
    # (the fleet's own word in a room: pause, halt, budget, a decline, a board), ask (an
    # owner's DM with choices, ``ask_id``), vote (a question to the room with a button per
    # option, ``vote_id``), post (anything else, and rows from before v4).
    purpose: Annotated[str, Col(server_default="post")]
    ask_id: int | None  # owner_asks.id for purpose ask (the DM and its updates)
    turn_id: int | None  # turns.id for purpose reply
    vote_id: int | None  # votes.id for purpose vote (the question and its closing edit)
    # An update written before the post it updates had its ts names that post's key;
    # the poster fills the ts in once that post is sent.
    update_of: str | None
    channel: str | None  # a conversation id, or None with dm_user set
    dm_user: str | None  # open an IM with this user first
    thread_ts: str | None
    update_ts: str | None  # for kind=update and kind=reaction
    text: str
    # Before v4 the deciding code wrote Block Kit and Slack metadata here; the poster now
    # renders both from the row (``blocks`` is still sent for a row queued before then).
    blocks: str | None
    metadata_json: str | None
    status: str  # queued | sending (in doubt if the process died) | sent | failed | cancelled
    attempts: int
    error: str | None
    posted_channel: str | None
    posted_ts: str | None
    created_at: float
    sent_at: float | None
    # When the poster last called Slack for the row (v5), written before the call: a
    # post left in doubt is looked for only among messages newer than this.
    attempted_at: float | None

    @property
    def blocks_list(self) -> list[dict[str, Any]] | None:
        return json.loads(self.blocks) if self.blocks else None


@table("outbox_files", key=("outbox_id",))
@dataclass(frozen=True, slots=True)
class OutboxFileRow:
    """What an outbox row of ``kind = file`` uploads (a turn's ``send_file``, docs/agents.md):
    queued with the row, in the turn's transaction. ``file_id`` is Slack's id of the upload,
    recorded once the bytes are up and before ``files.completeUploadExternal``: a run that
    dies between the two completes that file instead of uploading another."""

    outbox_id: int
    filename: str
    title: str
    content: str  # the file's text (at most 1 MB of UTF-8)
    file_id: str | None


@table(
    "turns",
    key=("id",),
    constraints=(Index("turns_by_thread", "instance", "channel", "thread_key", "id"),),
)
@dataclass(frozen=True, slots=True)
class TurnRow:
    """One run of an instance's agent on the messages that woke it (docs/agents.md).

    ``status``: ``running`` (the agent is working; a restart finds it ``abandoned``
    and runs the turn again, its messages still pending), ``done`` (the agent's
    output is recorded: its posts are outbox rows), ``silent`` (done, nothing to
    post), ``failed`` (the back end failed; nothing posted), ``budget`` (refused:
    the daily token cap was spent), ``halted`` (cancelled or not recorded because an
    owner halted the room: its messages stay pending for the turn after the resume).
    ``through_ts`` is the newest message the turn
    answered: the next turn in the thread shows what came after it.
    """

    id: int
    instance: str
    channel: str
    thread_key: str  # "" in DMs
    reply_thread_ts: str  # where the posts go ("" : top level)
    sender_id: str
    status: str
    through_ts: str
    messages: int
    posts: int
    tokens: int
    wrapping_up: bool
    error: str | None
    started_at: float
    finished_at: float | None


@table("agent_usage", key=("instance", "day"))
@dataclass(frozen=True, slots=True)
class AgentUsage:
    """Tokens an instance's LLM back end used per UTC day (``NANOSLACK_DAILY_TOKENS``)."""

    instance: str
    day: str  # YYYY-MM-DD, UTC
    tokens: int


# -- schema version 2 ------------------------------------------------------------------


@table("cache_version", key=("id",))
@dataclass(frozen=True, slots=True)
class CacheVersion:
    """One row whose ``version`` moves whenever state the router and the gate cache
    changes, whoever changed it (docs/data.md, docs/operations.md).

    On PostgreSQL, triggers on the cached tables bump it, so an operator's ``psql``
    UPDATE applies to the next message in every process. SQLite has
    ``PRAGMA data_version`` for that and leaves the row alone.
    """

    id: Annotated[int, Col(autoincrement=False)]  # always 1
    version: Annotated[int, Col(server_default="0")]


@table("instance_leases", key=("instance",))
@dataclass(frozen=True, slots=True)
class LeaseRow:
    """Which process runs an instance (docs/operations.md): one row per instance, renewed by a
    heartbeat; a lapsed lease may be taken by a standby."""

    instance: str
    holder: str  # "<host>:<pid>:<random>", unique per process
    expires_at: float
    heartbeat_at: float


# -- schema version 3 ------------------------------------------------------------------


@table("room_halts", key=("room",))
@dataclass(frozen=True, slots=True)
class HaltRow:
    """A room an owner halted (docs/operations.md): no bot message, no turn, until resumed.

    The row's insert decides who announces the halt: every instance in the room
    hears the 🛑, the one whose insert landed posts the notice and the DMs.
    """

    room: str  # conversation id
    halted_by: str  # slack:U… of the owner, or "cli"
    halted_at: float
    instance: str | None  # the instance that announced it


@table("budget_grants", key=("scope", "subject", "day"))
@dataclass(frozen=True, slots=True)
class Grant:
    """An owner's answer when a daily token budget ran out (docs/operations.md).

    ``scope`` is ``room`` (``NANOSLACK_ROOM_TOKENS``, subject = conversation id) or
    ``instance`` (``NANOSLACK_DAILY_TOKENS``, subject = instance name). Allow sets
    ``allowed`` to what was spent plus one more budget (0: no raised cap); Stop sets
    ``stopped_by``.
    """

    scope: str
    subject: str
    day: str  # YYYY-MM-DD, UTC
    allowed: int
    stopped_by: str | None
    updated_at: float


# -- schema version 4 ------------------------------------------------------------------


@table(
    "owner_asks",
    key=("id",),
    constraints=(
        Index(
            "owner_asks_open",
            "kind",
            "ref",
            unique=True,
            sqlite_where=text("status = 'open'"),
            postgresql_where=text("status = 'open'"),
        ),
    ),
)
@dataclass(frozen=True, slots=True)
class AskRow:
    """A question put to the owners (``nanoslack.asks``): a sender approval, a halted
    room's Resume, a spent budget's Allow/Stop. One DM per owner (outbox rows with
    ``purpose = 'ask'``); the first answer decides and every DM is updated with it.

    At most one open ask per (kind, ref): the insert that lands decides which instance
    asks when several notice the same thing at once.
    """

    id: int
    kind: str  # approval | halt | budget | tool
    ref: str  # what the answer is about (an approval id, a room, a budget): the button's value
    instance: str  # the instance that asked (its app sends the DMs)
    question: str  # mrkdwn, one line
    detail: str | None  # shown under the question while the ask is open
    status: str  # open | answered
    choice: str | None
    answered_by: str | None
    verdict: str | None  # shown in place of the buttons once answered
    created_at: float
    answered_at: float | None

    @property
    def is_open(self) -> bool:
        return self.status == "open"


# -- schema version 5 ------------------------------------------------------------------


@table(
    "turn_steps",
    key=("id",),
    constraints=(Index("turn_steps_by_turn", "turn_id", "step"),),
)
@dataclass(frozen=True, slots=True)
class StepRow:
    """One model call or tool call of a turn (docs/agents.md):
    ``nanoslack turns --steps TURN_ID``. Written as it happens, so a turn that never
    finished still shows how far it got; pruned with its turn. Arguments are cut to 500
    characters and never hold a secret (tokens are masked before they are stored)."""

    id: int
    turn_id: int
    step: int  # 1-based, in the order the steps happened
    kind: str  # model | tool
    name: str  # the model, or the tool
    arguments: str | None
    result_size: int  # characters of the tool's result
    tokens: int
    # Of ``tokens``, the input read from the provider's prompt cache (schema version 8).
    cached_tokens: int
    ms: float
    error: str | None
    created_at: float
    # What the model call cost in US dollars by ``genai-prices`` (schema version 12, last
    # as its ALTER TABLE puts it); NULL for a tool call and for a model the price table
    # does not know (docs/agents.md).
    cost_usd: float | None


@table("handoffs", key=("id",))
@dataclass(frozen=True, slots=True)
class HandoffRow:
    """Work one instance handed to another with ``send_to_agent`` (docs/agents.md), committed
    with the sender's turn. The recipient's turn is woken by a ``messages`` row (status
    ``pending``) written in the same transaction, in the conversation and thread the
    handoff came from; ``depth`` is how many handoffs led here (a relay goes two deep)."""

    id: int
    from_instance: str
    to_instance: str
    channel: str
    thread_key: str
    text: str
    depth: int
    turn_id: int  # the sender's turn
    ts: str  # the recipient's messages row
    created_at: float
    # The sender's turn's trace as W3C ``traceparent`` when traces are on (schema version
    # 13): the recipient's turn continues it, in whichever process (docs/operations.md).
    traceparent: str | None
    # A routine's handoff (schema version 20, docs/routines.md): the outbox key of the run's
    # post, whose thread the answer goes to. Until that post is sent the recipient's message
    # waits (status ``waiting``, ``ts`` and ``thread_key`` not final); the poster delivers it
    # when it records the post sent, in that transaction, and clears this. NULL otherwise.
    waits_on: str | None


@table("a2a_rooms", key=("platform_id",))
@dataclass(frozen=True, slots=True)
class RoomRow:
    """How an A2A room works (docs/team-rooms.md): its kind, lead and mission, set by
    ``open-room --kind … --lead … --mission …`` or an operator's SQL. A room without a row
    is a ``mention`` room."""

    platform_id: str  # slack:<conversation id>
    kind: str  # mention | round | chain (an operator's typo reads as mention)
    lead: str | None  # chain: the instance that gives directives
    mission: str | None  # shown in every turn of the room
    # The fleet's instances in the room (comma list, open-room writes it): who a round waits for.
    members: Annotated[tuple[str, ...], _TEXT_LIST_OR_NULL]
    # Their bot user ids (comma list): a human's message naming one of them names a bot.
    member_users: Annotated[tuple[str, ...], _TEXT_LIST_OR_NULL]
    updated_at: float

    @property
    def channel(self) -> str:
        return self.platform_id.removeprefix("slack:")


@table(
    "rounds",
    key=("id",),
    constraints=(
        UniqueConstraint("room", "question_ts"),
        Index("rounds_by_room", "room", "status"),
    ),
)
@dataclass(frozen=True, slots=True)
class RoundRow:
    """One question to a ``round`` room (docs/team-rooms.md): every bot of the room (or the ones
    named) answers at once, then the chief closes with a dispatch. A room runs one round
    at a time: a question asked meanwhile waits (``waiting``) until the open one closes.

    ``status``: waiting → open → closing (the chief's closing turn is queued) → closed,
    or ``stopped`` (an owner halted the room: no further post, no close).
    """

    id: int
    room: str
    thread_key: str  # where the answers and the dispatch go
    question_ts: str
    question: str
    named: bool  # the human named bots: only they answer
    chief: str | None  # the instance that closes it (None: no close)
    close_ts: str | None  # the chief's closing message (its messages row)
    status: str
    created_at: float
    closed_at: float | None


@table("round_members", key=("round_id", "instance"))
@dataclass(frozen=True, slots=True)
class MemberRow:
    """A bot answering a round: joined when its pipeline let the question through,
    finished when its turn was recorded (answered, silent, failed)."""

    round_id: int
    instance: str
    status: str  # answering | done | silent | failed | budget
    turn_id: int | None
    joined_at: float
    finished_at: float | None

    @property
    def finished(self) -> bool:
        return self.status != "answering"


# -- schema version 6 ------------------------------------------------------------------

# A task's statuses: still in progress, and closed.
OPEN_STATUSES = ("working", "input_required")
CLOSED_STATUSES = ("completed", "failed", "canceled")


@table(
    "tasks",
    key=("id",),
    constraints=(
        UniqueConstraint("room", "request_ts", "instance"),
        Index("tasks_by_room", "room", "status"),
    ),
)
@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task on a room's board (docs/team-rooms.md): opened by a ``working``
    report answering a request (``request_ts``, the asking message), updated by later
    reports on it, closed by ``completed``/``failed``/``canceled``. One row per (room,
    request, owner). ``pinged_at``: the one ping of the current silence; ``stale_at``: quiet
    so long it no longer counts as in progress (its status stays what it was)."""

    id: int
    room: str  # conversation id
    thread_ts: str  # the thread the request was made in (pings go there)
    request_ts: str  # the message that asked (the report's reply_to)
    instance: str  # who is on it
    status: str  # OPEN_STATUSES or CLOSED_STATUSES
    progress_done: int | None
    progress_total: int | None
    step: str | None
    text: str
    created_at: float
    updated_at: float  # the last report on it: what its silence is measured from
    pinged_at: float | None
    stale_at: float | None
    closed_at: float | None

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


@table("boards", key=("room",))
@dataclass(frozen=True, slots=True)
class BoardRow:
    """A room's board: one message, posted once by ``instance`` (outbox key ``post_key``)
    and then only edited (``chat.update``). ``text`` is what it last said, so an edit is
    queued only when that changes; ``ts`` the message's, once it is out."""

    room: str
    instance: str
    post_key: str
    ts: str | None
    text: str
    version: int
    updated_at: float


@table(
    "votes",
    key=("id",),
    constraints=(Index("votes_by_room", "room", "status"),),
)
@dataclass(frozen=True, slots=True)
class VoteRow:
    """A question put to a room (docs/team-rooms.md). ``humans`` and ``bots`` (JSON lists:
    Slack user ids, instance names) are who it waits for, fixed when it opens; ``ts`` is the
    vote message's (what ``ballot(vote_ts, …)`` names), ``posted_at`` when it went out (the
    reminder's clock starts then), ``result`` the closing line as posted."""

    id: int
    room: str
    thread_ts: str
    instance: str  # who asked (its app posts the question, the reminder and the result)
    question: str
    options: Annotated[tuple[str, ...], _TEXT_LIST]  # JSON list
    humans: Annotated[tuple[str, ...], _TEXT_LIST]  # Slack user ids
    bots: Annotated[tuple[str, ...], _TEXT_LIST]  # instance names
    post_key: str
    status: str  # open | closed | failed (the question could not be posted)
    ts: str | None
    posted_at: float | None
    reminded_at: float | None
    closed_at: float | None
    result: str | None
    created_at: float

    @property
    def is_open(self) -> bool:
        return self.status == "open"

    @property
    def electorate(self) -> tuple[str, ...]:
        """Every voter it waits for, as ballots name them (``slack:U…``, instance names)."""
        return (*(human_voter(u) for u in self.humans), *self.bots)


def human_voter(slack_user_id: str) -> str:
    return f"slack:{slack_user_id}"


@table("ballots", key=("vote_id", "voter"))
@dataclass(frozen=True, slots=True)
class BallotRow:
    """One voter's answer to a vote; a second one replaces it."""

    vote_id: int
    voter: str  # slack:U… for a person, the instance name for a bot
    kind: str  # human | bot
    choice: str
    cast_at: float


# -- schema version 8 ------------------------------------------------------------------


@table(
    "agent_history",
    key=("id",),
    constraints=(Index("agent_history_by_thread", "instance", "channel", "thread_key", "id"),),
)
@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One turn of an agent's own conversation in one thread (docs/memory.md): what it was
    shown (``prompt``, the turn's tagged new part) and did (``messages``: the model
    messages as pydantic-ai serialises them, tool results cut; empty for back ends without
    a model; ``posts``: a JSON list of what it posted). Written in the transaction that
    records the turn, so a turn re-run after a crash keeps only the attempt that counted.
    ``opening`` is set on the turn that (re)built the thread's opening (a JSON object: the
    system prompt and the notes shown); ``notes_known`` the note ids the thread knows of
    after the turn. ``chars`` is what the turn costs the thread's history bound."""

    id: int
    instance: str
    channel: str  # the conversation (a routine's own: "routine:<name>")
    thread_key: str  # "" in a DM
    turn_id: int
    prompt: str
    messages: str  # "" without a model
    posts: Annotated[tuple[str, ...], _TEXT_LIST]
    opening: str  # JSON {"system": …, "notes": […]} on the turn that built the opening
    notes_known: Annotated[tuple[int, ...], _TEXT_LIST]
    chars: int
    created_at: float
    # Where each message the turn was shown sits in ``prompt`` (schema version 19): a JSON
    # list of ``[ts, start, end, head]`` (``head``: the ``name: `` before its words), so a
    # message deleted later is replaced there and in ``messages`` by ``[a message was
    # deleted]`` (docs/agents.md, "Edits and deletes"). NULL on rows written before.
    shown: str | None = None


@table(
    "memories",
    key=("id",),
    constraints=(
        Index("memories_by_instance", "instance", "scope"),
        Index("memories_by_conversation", "conversation"),
    ),
)
@dataclass(frozen=True, slots=True)
class NoteRow:
    """A note an agent keeps (docs/memory.md): ``scope`` ``self`` / ``private`` (the
    instance's own) or ``room`` (every instance in ``conversation``, ``slack:<channel>``).
    A note written by a turn is a ``draft`` until the turn is recorded, then ``kept``:
    a turn lost to a crash leaves nothing behind, its re-run writes the note once."""

    id: int
    instance: str
    scope: str  # self | private | room
    conversation: str  # slack:<channel> for room notes, else ""
    text: str
    asked_by: str  # a users.id (slack:U…, slack:bot:B…), or "operator"
    turn_id: int | None
    status: str  # draft | kept
    created_at: float

    @property
    def ref(self) -> str:
        """How agents and operators name it: ``m<id>``."""
        return f"m{self.id}"


@table("routines", key=("instance", "name", "source"))
@dataclass(frozen=True, slots=True)
class RoutineStateRow:
    """One routine of an instance, and what operators set on it across processes:
    ``paused``, a run asked for now (docs/routines.md). ``source`` says where it was
    defined: ``file`` (as the fleet last read ``routines.toml``; ``active`` is false for one
    no longer in the file, its pause kept) or ``agent`` (set by the agent with
    ``schedule_routine``, whose ``prompt`` lives here; always active). A name may have
    both: the file's runs and the agent's is shadowed."""

    instance: str
    name: str
    source: Annotated[str, Col(server_default="file")]  # file | agent
    schedule: str
    channel: str
    prompt: Annotated[str, Col(server_default="")]  # the agent's routines only
    next_due: float | None
    active: bool
    paused: bool
    paused_by: str | None
    run_requested_at: float | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class ListingRow(RoutineStateRow):
    """A routine as ``nanoslack routines`` lists it: with its latest run's status and reason."""

    last_status: str | None
    last_reason: str | None


@table(
    "routine_runs",
    key=("id",),
    constraints=(
        UniqueConstraint("instance", "routine", "due_at"),
        Index("routine_runs_running", "instance", sqlite_where=text("status = 'running'")),
    ),
)
@dataclass(frozen=True, slots=True)
class RunRow:
    """One due time of a routine: claimed by its unique insert, so no due time runs twice.

    ``status``: ``running`` (claimed, waiting for its turn or in it), ``done``, ``silent``,
    ``failed``, ``skipped`` (``reason``: ``still running``, ``gate``, ``paused``,
    ``room halted``, ``budget``), ``missed`` (nobody held the instance then)."""

    id: int
    instance: str
    routine: str
    due_at: float
    status: str
    reason: str
    turn_id: int | None
    tokens: Annotated[int, Col(server_default="0")]
    started_at: float | None
    ended_at: float | None


@table("assistant_threads", key=("instance", "channel", "thread_ts"))
@dataclass(frozen=True, slots=True)
class AssistantThread:
    """The channel a person was viewing when they opened the instance's assistant pane
    or last switched channels with it open (docs/agent-surface.md); one row per thread.
    Schema version 9 created it by plain SQL, with these very columns."""

    instance: str
    channel: str
    thread_ts: str
    user_id: str | None
    context_channel: str | None
    context_name: str | None
    updated_at: float


@table("reply_drafts", key=("instance", "turn_id"))
@dataclass(frozen=True, slots=True)
class ReplyDraft:
    """The stream a turn opened in Slack while its model was still writing
    (docs/agent-surface.md): ``ts`` is "" until Slack answered the start. Schema version
    11 created it by plain SQL, with these very columns."""

    instance: str
    turn_id: Annotated[int, Col(autoincrement=False)]
    channel: str
    thread_ts: str
    ts: str  # "" when the start's answer was never recorded
    started_at: float


@table("reactions", key=("instance", "channel", "ts", "user_id", "emoji"))
@dataclass(frozen=True, slots=True)
class ReactionRow:
    """A person's reaction to one of the instance's posts (docs/agents.md): that thread's
    next turn is shown it once, as a ``[reactions]`` line; it wakes nothing."""

    instance: str
    channel: str
    ts: str  # the reaction event's ts: Slack's clock, ordered with the thread's messages
    user_id: str
    emoji: str
    thread_key: str  # the thread of the post reacted to ("" in a DM)
    excerpt: str  # the post's first words
    created_at: float


@table("message_files", key=("instance", "channel", "ts"))
@dataclass(frozen=True, slots=True)
class MessageFilesRow:
    """The files a stored message carries (docs/agents.md "Files"): Slack's description of
    each (``inbound.FileRef`` as a JSON list), for the turn that answers the message to
    fetch. Goes with its message (retention); the downloaded copies with the last row that
    names their file id."""

    instance: str
    channel: str
    ts: str
    files: str  # JSON: [[id, name, mimetype, size, url, access], …]
    created_at: float


@table("feedback", key=("instance", "turn_id", "user_id"))
@dataclass(frozen=True, slots=True)
class FeedbackRow:
    """A person's 👍 or 👎 on a turn's DM reply (Slack's feedback buttons,
    docs/agent-surface.md "Feedback"): their last click counts."""

    instance: str
    turn_id: Annotated[int, Col(autoincrement=False)]
    user_id: str
    value: str  # "positive" | "negative"
    at: float
