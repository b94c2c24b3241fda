"""Every table nanoslack keeps, in one place (docs/data.md).

Names that operators use in SQL (``messaging_groups``, ``users``, ``agent_groups``,
``agent_group_members``, ``pending_sender_approvals`` and their documented columns)
are fixed; the rest is ours. Times are Unix seconds (REAL).
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, UniqueConstraint, text
from sqlmodel import Field, SQLModel


class SchemaMeta(SQLModel, table=True):
    __tablename__ = "schema_meta"
    key: str = Field(primary_key=True)
    value: str


class InboxEntry(SQLModel, table=True):
    """Durable inbox (docs/architecture.md): one row per (instance, channel, ts), written before the ack."""

    __tablename__ = "inbox"
    __table_args__ = (Index("inbox_unfinished", "instance", sqlite_where=text("status = 'received'")),)
    instance: str = Field(primary_key=True)
    channel: str = Field(primary_key=True)
    ts: str = Field(primary_key=True)
    event_type: str
    event_id: str | None = None
    payload: str  # Inbound as JSON, so a restart can resume it
    status: str = "received"  # received | done | dropped | failed
    reason: str | None = None
    attempts: int = 0
    received_at: float
    finished_at: float | None = None


class A2AHop(SQLModel, table=True):
    """One admitted bot message (a hop) held by one instance in one room (docs/architecture.md).

    A row per (room, instance, ts) makes a reservation idempotent across a crash
    and lets ``room`` scope count distinct messages across the fleet.
    """

    __tablename__ = "a2a_hops"
    room: str = Field(primary_key=True)
    instance: str = Field(primary_key=True)
    ts: str = Field(primary_key=True)
    bot_id: str
    created_at: float


class MessagingGroup(SQLModel, table=True):
    __tablename__ = "messaging_groups"
    __table_args__ = (UniqueConstraint("platform", "platform_id", "instance"),)
    id: int | None = Field(default=None, primary_key=True)
    platform: str = "slack"
    platform_id: str  # slack:<conversation id>
    instance: str
    kind: str  # dm | group
    name: str | None = None
    engage_mode: str  # pattern | mention | mention-sticky
    engage_pattern: str | None = None
    unknown_sender_policy: str  # public | request_approval | strict | decline_notify
    created_at: float


class User(SQLModel, table=True):
    __tablename__ = "users"
    id: str = Field(primary_key=True)  # slack:U… or slack:bot:B…
    kind: str  # human | bot
    display_name: str | None = None
    slack_user_id: str | None = None  # the U… of a human, or a bot's bot user
    created_at: float
    updated_at: float


class AgentGroup(SQLModel, table=True):
    __tablename__ = "agent_groups"
    id: int | None = Field(default=None, primary_key=True)
    instance: str = Field(sa_column=Column(String, unique=True, nullable=False))
    name: str
    created_at: float


class AgentGroupMember(SQLModel, table=True):
    __tablename__ = "agent_group_members"
    agent_group_id: int = Field(primary_key=True, foreign_key="agent_groups.id")
    user_id: str = Field(primary_key=True)
    role: str = "member"  # member | admin
    added_at: float
    added_by: str | None = None


class EngagedThread(SQLModel, table=True):
    """Where an instance is engaged (mention-sticky, docs/architecture.md): one row per thread."""

    __tablename__ = "engaged_threads"
    messaging_group_id: int = Field(primary_key=True, foreign_key="messaging_groups.id")
    thread_key: str = Field(primary_key=True)
    engaged_at: float


class Message(SQLModel, table=True):
    """Every message that passed the guard, as one instance saw it.

    ``status``: ``context`` (not engaged: room context for later turns), ``pending``
    (engaged and allowed: waiting for a turn), ``held`` (waiting for an approval),
    ``refused`` (the gate said no), ``done`` (a turn consumed it).
    """

    __tablename__ = "messages"
    __table_args__ = (
        Index("messages_pending", "instance", "thread_key", sqlite_where=text("status = 'pending'")),
        Index("messages_by_group", "messaging_group_id", "ts"),
        Index("messages_held", "instance", "sender_id", sqlite_where=text("status = 'held'")),
    )
    instance: str = Field(primary_key=True)
    channel: str = Field(primary_key=True)
    ts: str = Field(primary_key=True)
    thread_key: str = ""  # "" in DMs
    messaging_group_id: int | None = None
    sender_id: str
    text: str
    status: str
    hop: int = 0
    hop_limit: int = 0
    # A message another instance handed over (``send_to_agent``): how many handoffs led
    # here (0: a Slack message).
    handoff_depth: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    created_at: float


class PendingSenderApproval(SQLModel, table=True):
    """One approval question per (agent group, sender), whatever the number of messages."""

    __tablename__ = "pending_sender_approvals"
    __table_args__ = (UniqueConstraint("agent_group_id", "sender_id"),)
    id: int | None = Field(default=None, primary_key=True)
    agent_group_id: int = Field(foreign_key="agent_groups.id")
    messaging_group_id: int = Field(foreign_key="messaging_groups.id")
    sender_id: str
    status: str = "pending"  # pending | approved | denied
    owner_id: str | None = None
    request_channel: str | None = None
    request_ts: str | None = None
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None


class SenderRefusal(SQLModel, table=True):
    """Audit of gate refusals (docs/architecture.md): counted, with first and last sighting."""

    __tablename__ = "sender_refusals"
    messaging_group_id: int = Field(primary_key=True, foreign_key="messaging_groups.id")
    sender_id: str = Field(primary_key=True)
    reason: str = Field(primary_key=True)
    instance: str
    count: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    first_seen: float
    last_seen: float
    # When the sender was last told no (decline_notify), so a chatty sender gets one
    # notice per day, not one per message.
    notified_at: float | None = None


class OutboxPost(SQLModel, table=True):
    """Posts to make, written in the same transaction as the decision behind them.

    ``dedupe_key`` makes a post happen once even across a crash; a poster sends
    rows in ``queued`` state and records Slack's ts.
    """

    __tablename__ = "outbox"
    __table_args__ = (Index("outbox_queued", "instance", sqlite_where=text("status = 'queued'")),)
    id: int | None = Field(default=None, primary_key=True)
    instance: str
    dedupe_key: str = Field(sa_column=Column(String, unique=True, nullable=False))
    kind: str = "post"  # post | update
    # What the row is, so nobody reads it off the key: reply (a turn's post), notice
    # (the fleet's own word in a room: pause, halt, budget, a decline, a board), ask (an
    # owner's DM with choices, ``ask_id``), vote (a question to the room with a button per
    # option, ``vote_id``), post (anything else, and rows from before v4).
    purpose: str = Field(default="post", sa_column=Column(String, nullable=False, server_default="post"))
    ask_id: int | None = None  # owner_asks.id for purpose ask (the DM and its updates)
    turn_id: int | None = None  # turns.id for purpose reply
    vote_id: int | None = None  # votes.id for purpose vote (the question and its closing edit)
    # An update written before the post it updates had its ts names that post's key;
    # the poster fills the ts in once that post is sent.
    update_of: str | None = None
    channel: str | None = None  # a conversation id, or None with dm_user set
    dm_user: str | None = None  # open an IM with this user first
    thread_ts: str | None = None
    update_ts: str | None = None  # for kind=update
    text: str
    # Before v4 the deciding code wrote Block Kit and Slack metadata here; the poster now
    # renders both from the row (``blocks`` is still sent for a row queued before then).
    blocks: str | None = None
    metadata_json: str | None = None
    status: str = "queued"  # queued | sent | failed | cancelled
    attempts: int = 0
    error: str | None = None
    posted_channel: str | None = None
    posted_ts: str | None = None
    created_at: float
    sent_at: float | None = None
    # When the poster last called Slack for the row (v5), written before the call: a
    # post left in doubt is looked for only among messages newer than this.
    attempted_at: float | None = None


class TurnRecord(SQLModel, table=True):
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

    __tablename__ = "turns"
    __table_args__ = (Index("turns_by_thread", "instance", "channel", "thread_key", "id"),)
    id: int | None = Field(default=None, primary_key=True)
    instance: str
    channel: str
    thread_key: str = ""  # "" in DMs
    reply_thread_ts: str = ""  # where the posts go ("" : top level)
    sender_id: str
    status: str = "running"
    through_ts: str
    messages: int = 0
    posts: int = 0
    tokens: int = 0
    wrapping_up: bool = False
    error: str | None = None
    started_at: float
    finished_at: float | None = None


class AgentUsage(SQLModel, table=True):
    """Tokens an instance's LLM back end used per UTC day (``NANOSLACK_DAILY_TOKENS``)."""

    __tablename__ = "agent_usage"
    instance: str = Field(primary_key=True)
    day: str = Field(primary_key=True)  # YYYY-MM-DD, UTC
    tokens: int = 0


# -- schema version 2 ------------------------------------------------------------------


class CacheVersion(SQLModel, table=True):
    """One row whose ``version`` moves whenever state the router and the gate cache
    changes, whoever changed it (docs/data.md, docs/operations.md).

    On PostgreSQL, triggers on the cached tables bump it, so an operator's ``psql``
    UPDATE applies to the next message in every process. SQLite has
    ``PRAGMA data_version`` for that and leaves the row alone.
    """

    __tablename__ = "cache_version"
    id: int = Field(default=1, primary_key=True)
    version: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))


class InstanceLease(SQLModel, table=True):
    """Which process runs an instance (docs/operations.md): one row per instance, renewed by a
    heartbeat; a lapsed lease may be taken by a standby."""

    __tablename__ = "instance_leases"
    instance: str = Field(primary_key=True)
    holder: str  # "<host>:<pid>:<random>", unique per process
    expires_at: float
    heartbeat_at: float


# -- schema version 3 ------------------------------------------------------------------


class RoomHalt(SQLModel, table=True):
    """A room an owner halted (docs/operations.md): no bot message, no turn, until resumed.

    The row's insert decides who announces the halt: every instance in the room
    hears the 🛑, the one whose insert landed posts the notice and the DMs.
    """

    __tablename__ = "room_halts"
    room: str = Field(primary_key=True)  # conversation id
    halted_by: str  # slack:U… of the owner, or "cli"
    halted_at: float
    instance: str | None = None  # the instance that announced it


class BudgetGrant(SQLModel, table=True):
    """An owner's answer when a daily token budget ran out (docs/operations.md).

    ``scope`` is ``room`` (``NANOSLACK_ROOM_TOKENS``, subject = conversation id) or
    ``instance`` (``NANOSLACK_DAILY_TOKENS``, subject = instance name). Allow sets
    ``allowed`` to what was spent plus one more budget; Stop sets ``stopped_by``.
    """

    __tablename__ = "budget_grants"
    scope: str = Field(primary_key=True)
    subject: str = Field(primary_key=True)
    day: str = Field(primary_key=True)  # YYYY-MM-DD, UTC
    allowed: int = 0
    stopped_by: str | None = None
    updated_at: float


# -- schema version 4 ------------------------------------------------------------------


class OwnerAsk(SQLModel, table=True):
    """A question put to the owners (``nanoslack.asks``): a sender approval, a halted
    room's Resume, a spent budget's Allow/Stop. One DM per owner (outbox rows with
    ``purpose = 'ask'``); the first answer decides and every DM is updated with it.

    At most one open ask per (kind, ref): the insert that lands decides which instance
    asks when several notice the same thing at once.
    """

    __tablename__ = "owner_asks"
    __table_args__ = (
        Index(
            "owner_asks_open",
            "kind",
            "ref",
            unique=True,
            sqlite_where=text("status = 'open'"),
            postgresql_where=text("status = 'open'"),
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    kind: str  # approval | halt | budget
    ref: str  # what the answer is about (an approval id, a room, a budget): the button's value
    instance: str  # the instance that asked (its app sends the DMs)
    question: str  # mrkdwn, one line
    detail: str | None = None  # shown under the question while the ask is open
    status: str = "open"  # open | answered
    choice: str | None = None
    answered_by: str | None = None
    verdict: str | None = None  # shown in place of the buttons once answered
    created_at: float
    answered_at: float | None = None


# -- schema version 5 ------------------------------------------------------------------


class TurnStep(SQLModel, table=True):
    """One model call or tool call of a turn (docs/agents.md):
    ``nanoslack turns --steps TURN_ID``. Written as it happens, so a turn that never
    finished still shows how far it got; pruned with its turn. Arguments are cut to 500
    characters and never hold a secret (tokens are masked before they are stored)."""

    __tablename__ = "turn_steps"
    __table_args__ = (Index("turn_steps_by_turn", "turn_id", "step"),)
    id: int | None = Field(default=None, primary_key=True)
    turn_id: int
    step: int  # 1-based, in the order the steps happened
    kind: str  # model | tool
    name: str  # the model, or the tool
    arguments: str | None = None
    result_size: int = 0  # characters of the tool's result
    tokens: int = 0
    # Of ``tokens``, the input read from the provider's prompt cache (schema version 8).
    cached_tokens: int = 0
    ms: float = 0.0
    error: str | None = None
    created_at: float
    # What the model call cost in US dollars by ``genai-prices`` (schema version 12, last
    # as its ALTER TABLE puts it); NULL for a tool call and for a model the price table
    # does not know (docs/agents.md).
    cost_usd: float | None = None


class Handoff(SQLModel, table=True):
    """Work one instance handed to another with ``send_to_agent`` (docs/agents.md), committed
    with the sender's turn. The recipient's turn is woken by a ``messages`` row (status
    ``pending``) written in the same transaction, in the conversation and thread the
    handoff came from; ``depth`` is how many handoffs led here (a relay goes two deep)."""

    __tablename__ = "handoffs"
    id: int | None = Field(default=None, primary_key=True)
    from_instance: str
    to_instance: str
    channel: str
    thread_key: str = ""
    text: str
    depth: int = 1
    turn_id: int  # the sender's turn
    ts: str  # the recipient's messages row
    created_at: float


class A2ARoom(SQLModel, table=True):
    """How an A2A room works (docs/team-rooms.md): its kind, lead and mission, set by
    ``open-room --kind … --lead … --mission …`` or an operator's SQL. A room without a row
    is a ``mention`` room."""

    __tablename__ = "a2a_rooms"
    platform_id: str = Field(primary_key=True)  # slack:<conversation id>
    kind: str = "mention"  # mention | round | chain
    lead: str | None = None  # chain: the instance that gives directives
    mission: str | None = None  # shown in every turn of the room
    # The fleet's instances in the room (comma list, open-room writes it): who a round waits for.
    members: str | None = None
    # Their bot user ids (comma list): a human's message naming one of them names a bot.
    member_users: str | None = None
    updated_at: float


class Round(SQLModel, table=True):
    """One question to a ``round`` room (docs/team-rooms.md): every bot of the room (or the ones
    named) answers at once, then the chief closes with a dispatch. A room runs one round
    at a time: a question asked meanwhile waits (``waiting``) until the open one closes.

    ``status``: waiting → open → closing (the chief's closing turn is queued) → closed,
    or ``stopped`` (an owner halted the room: no further post, no close).
    """

    __tablename__ = "rounds"
    __table_args__ = (
        UniqueConstraint("room", "question_ts"),
        Index("rounds_by_room", "room", "status"),
    )
    id: int | None = Field(default=None, primary_key=True)
    room: str
    thread_key: str  # where the answers and the dispatch go
    question_ts: str
    question: str
    named: bool = False  # the human named bots: only they answer
    chief: str | None = None  # the instance that closes it (None: no close)
    close_ts: str | None = None  # the chief's closing message (its messages row)
    status: str = "open"
    created_at: float
    closed_at: float | None = None


class RoundMember(SQLModel, table=True):
    """A bot answering a round: joined when its pipeline let the question through,
    finished when its turn was recorded (answered, silent, failed)."""

    __tablename__ = "round_members"
    round_id: int = Field(primary_key=True)
    instance: str = Field(primary_key=True)
    status: str = "answering"  # answering | done | silent | failed | budget
    turn_id: int | None = None
    joined_at: float
    finished_at: float | None = None


# -- schema version 6 ------------------------------------------------------------------


class TeamTask(SQLModel, table=True):
    """A task on a room's board (docs/team-rooms.md): opened by a ``working``
    report answering a request (``request_ts``, the asking message), updated by later
    reports on it, closed by ``completed``/``failed``/``canceled``. One row per (room,
    request, owner). ``pinged_at``: the one ping of the current silence; ``stale_at``: quiet
    so long it no longer counts as in progress (its status stays what it was)."""

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("room", "request_ts", "instance"),
        Index("tasks_by_room", "room", "status"),
    )
    id: int | None = Field(default=None, primary_key=True)
    room: str  # conversation id
    thread_ts: str  # the thread the request was made in (pings go there)
    request_ts: str  # the message that asked (the report's reply_to)
    instance: str  # who is on it
    status: str  # working | input_required | completed | failed | canceled
    progress_done: int | None = None
    progress_total: int | None = None
    step: str | None = None
    text: str = ""
    created_at: float
    updated_at: float  # the last report on it: what its silence is measured from
    pinged_at: float | None = None
    stale_at: float | None = None
    closed_at: float | None = None


class TeamBoard(SQLModel, table=True):
    """A room's board: one message, posted once by ``instance`` (outbox key ``post_key``)
    and then only edited (``chat.update``). ``text`` is what it last said, so an edit is
    queued only when that changes; ``ts`` the message's, once it is out."""

    __tablename__ = "boards"
    room: str = Field(primary_key=True)
    instance: str
    post_key: str
    ts: str | None = None
    text: str = ""
    version: int = 0
    updated_at: float


class TeamVote(SQLModel, table=True):
    """A question put to a room (docs/team-rooms.md). ``humans`` and ``bots`` (JSON lists:
    Slack user ids, instance names) are who it waits for, fixed when it opens; ``ts`` is the
    vote message's (what ``ballot(vote_ts, …)`` names), ``posted_at`` when it went out (the
    reminder's clock starts then), ``result`` the closing line as posted."""

    __tablename__ = "votes"
    __table_args__ = (Index("votes_by_room", "room", "status"),)
    id: int | None = Field(default=None, primary_key=True)
    room: str
    thread_ts: str
    instance: str  # who asked (its app posts the question, the reminder and the result)
    question: str
    options: str  # JSON list
    humans: str = "[]"
    bots: str = "[]"
    post_key: str
    status: str = "open"  # open | closed | failed (the question could not be posted)
    ts: str | None = None
    posted_at: float | None = None
    reminded_at: float | None = None
    closed_at: float | None = None
    result: str | None = None
    created_at: float


class TeamBallot(SQLModel, table=True):
    """One voter's answer to a vote; a second one replaces it."""

    __tablename__ = "ballots"
    vote_id: int = Field(primary_key=True)
    voter: str = Field(primary_key=True)  # slack:U… for a person, the instance name for a bot
    kind: str  # human | bot
    choice: str
    cast_at: float


# -- schema version 8 ------------------------------------------------------------------


class AgentHistoryRow(SQLModel, table=True):
    """One turn of an agent's own conversation in one thread (docs/memory.md): what it was
    shown (``prompt``, the turn's tagged new part) and did (``messages``: the model
    messages as pydantic-ai serialises them, tool results cut; empty for back ends without
    a model; ``posts``: a JSON list of what it posted). Written in the transaction that
    records the turn, so a turn re-run after a crash keeps only the attempt that counted.
    ``opening`` is set on the turn that (re)built the thread's opening (a JSON object: the
    system prompt and the notes shown); ``notes_known`` the note ids the thread knows of
    after the turn. ``chars`` is what the turn costs the thread's history bound."""

    __tablename__ = "agent_history"
    __table_args__ = (Index("agent_history_by_thread", "instance", "channel", "thread_key", "id"),)
    id: int | None = Field(default=None, primary_key=True)
    instance: str
    channel: str  # the conversation (a routine's own: "routine:<name>")
    thread_key: str  # "" in a DM
    turn_id: int
    prompt: str
    messages: str = ""
    posts: str = "[]"
    opening: str = ""
    notes_known: str = "[]"
    chars: int = 0
    created_at: float


class MemoryNote(SQLModel, table=True):
    """A note an agent keeps (docs/memory.md): ``scope`` ``self`` / ``private`` (the
    instance's own) or ``room`` (every instance in ``conversation``, ``slack:<channel>``).
    A note written by a turn is a ``draft`` until the turn is recorded, then ``kept``:
    a turn lost to a crash leaves nothing behind, its re-run writes the note once."""

    __tablename__ = "memories"
    __table_args__ = (
        Index("memories_by_instance", "instance", "scope"),
        Index("memories_by_conversation", "conversation"),
    )
    id: int | None = Field(default=None, primary_key=True)
    instance: str
    scope: str  # self | private | room
    conversation: str = ""  # slack:<channel> for room notes, else ""
    text: str
    asked_by: str  # a users.id (slack:U…, slack:bot:B…), or "operator"
    turn_id: int | None = None
    status: str = "kept"  # draft | kept
    created_at: float


class RoutineState(SQLModel, table=True):
    """One routine of an instance as the fleet last read it from ``routines.toml``, and what
    operators set on it across processes: ``paused``, a run asked for now (docs/routines.md).
    ``active`` is false for a routine no longer in its file (its pause is kept)."""

    __tablename__ = "routines"
    instance: str = Field(primary_key=True)
    name: str = Field(primary_key=True)
    schedule: str = ""
    channel: str = ""
    next_due: float | None = None
    active: bool = True
    paused: bool = False
    paused_by: str | None = None
    run_requested_at: float | None = None
    updated_at: float


class RoutineRun(SQLModel, table=True):
    """One due time of a routine: claimed by its unique insert, so no due time runs twice.

    ``status``: ``running`` (claimed, waiting for its turn or in it), ``done``, ``silent``,
    ``failed``, ``skipped`` (``reason``: ``still running``, ``gate``, ``paused``,
    ``room halted``, ``budget``), ``missed`` (nobody held the instance then)."""

    __tablename__ = "routine_runs"
    __table_args__ = (
        UniqueConstraint("instance", "routine", "due_at"),
        Index("routine_runs_running", "instance", sqlite_where=text("status = 'running'")),
    )
    id: int | None = Field(default=None, primary_key=True)
    instance: str
    routine: str
    due_at: float
    status: str
    reason: str = ""
    turn_id: int | None = None
    tokens: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    started_at: float | None = None
    ended_at: float | None = None


class AssistantThreadRow(SQLModel, table=True):
    """The channel a person was viewing when they opened the instance's assistant pane
    or last switched channels with it open (docs/agent-surface.md); one row per thread.
    Schema version 9 created it by plain SQL, with these very columns."""

    __tablename__ = "assistant_threads"
    instance: str = Field(primary_key=True)
    channel: str = Field(primary_key=True)
    thread_ts: str = Field(primary_key=True)
    user_id: str | None = None
    context_channel: str | None = None
    context_name: str | None = None
    updated_at: float


class ReplyDraftRow(SQLModel, table=True):
    """The stream a turn opened in Slack while its model was still writing
    (docs/agent-surface.md): ``ts`` is "" until Slack answered the start. Schema version
    11 created it by plain SQL, with these very columns."""

    __tablename__ = "reply_drafts"
    instance: str = Field(primary_key=True)
    turn_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    channel: str
    thread_ts: str
    ts: str
    started_at: float


# Every table above: the one definition ``migrations`` creates.
METADATA = SQLModel.metadata
