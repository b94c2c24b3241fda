"""The store: the one package that owns SQL (docs/data.md).

``Store.open(url)`` creates or migrates the schema and hands out one repository
per concept. Every repository method is one transaction unless it runs inside
``store.transaction()``, which lets the pipeline commit a message's routing,
its gate decision, its outbox posts and its inbox entry atomically.
"""

from __future__ import annotations

from collections.abc import Callable

from nanoslack.store import tables
from nanoslack.store.agents import AgentGroups
from nanoslack.store.approvals import ApprovalRow, Approvals
from nanoslack.store.asks import AskRow, Asks
from nanoslack.store.assistant import AssistantThreads
from nanoslack.store.budgets import Grant, Grants
from nanoslack.store.checkpoint import Checkpointer
from nanoslack.store.database import Database, JoinedTransaction, Transaction
from nanoslack.store.drafts import ReplyDraft, ReplyDrafts
from nanoslack.store.errors import StoreError, StoreUnavailable, store_unavailable
from nanoslack.store.feedback import Feedback
from nanoslack.store.files import MessageFiles
from nanoslack.store.groups import GroupRow, MessagingGroups
from nanoslack.store.handoffs import HandoffRow, Handoffs
from nanoslack.store.history import History, HistoryRow
from nanoslack.store.hops import HopCount, Hops
from nanoslack.store.inbox import Inbox
from nanoslack.store.leases import Leases
from nanoslack.store.memories import Memories, NoteRow
from nanoslack.store.messages import MessageRow, Messages
from nanoslack.store.migrations import SCHEMA_VERSION
from nanoslack.store.outbox import Outbox, OutboxRow, Purpose
from nanoslack.store.reactions import Reactions
from nanoslack.store.refusals import Refusals
from nanoslack.store.room_halts import HaltRow, RoomHalts
from nanoslack.store.room_kinds import RoomKinds, RoomRow
from nanoslack.store.rounds import MemberRow, RoundRow, Rounds
from nanoslack.store.routines import ListingRow, Routines, RoutineStateRow, RunRow
from nanoslack.store.steps import StepRow, Steps
from nanoslack.store.tasks import BoardRow, Boards, TaskRow, Tasks
from nanoslack.store.turns import TurnRow, Turns
from nanoslack.store.users import UserRow, Users
from nanoslack.store.votes import BallotRow, VoteRow, Votes

__all__ = [
    "SCHEMA_VERSION",
    "StepRow",
    "ApprovalRow",
    "AskRow",
    "BallotRow",
    "BoardRow",
    "Grant",
    "GroupRow",
    "HandoffRow",
    "HaltRow",
    "HistoryRow",
    "HopCount",
    "MessageRow",
    "OutboxRow",
    "ReplyDraft",
    "MemberRow",
    "NoteRow",
    "RoomRow",
    "RoundRow",
    "ListingRow",
    "RoutineStateRow",
    "RunRow",
    "Purpose",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TaskRow",
    "TurnRow",
    "UserRow",
    "VoteRow",
    "sqlite_url",
    "store_unavailable",
]


def sqlite_url(path: str) -> str:
    return f"sqlite:///{path}"


class Store:
    def __init__(self, db: Database, *, on_queued: Callable[[str], None] | None = None) -> None:
        """``on_queued``: called with the instance after every commit that queued an
        outbox row for it (the fleet wakes that instance's poster)."""
        self.db = db
        self.inbox = Inbox(db)
        self.hops = Hops(db)
        self.groups = MessagingGroups(db)
        self.users = Users(db)
        self.agents = AgentGroups(db)
        self.approvals = Approvals(db)
        self.refusals = Refusals(db)
        self.messages = Messages(db)
        # The files messages carry (docs/agents.md "Files").
        self.message_files = MessageFiles(db)
        self.outbox = Outbox(db, on_queued)
        self.turns = Turns(db)
        self.leases = Leases(db)
        self.room_halts = RoomHalts(db)
        self.asks = Asks(db)
        self.grants = Grants(db)
        self.steps = Steps(db)
        self.handoffs = Handoffs(db)
        self.room_kinds = RoomKinds(db)
        self.assistant_threads = AssistantThreads(db)
        self.reply_drafts = ReplyDrafts(db)
        self.reactions = Reactions(db)
        self.feedback = Feedback(db)
        self.rounds = Rounds(db)
        # Team rooms (docs/team-rooms.md): the board's tasks, and votes.
        self.tasks = Tasks(db)
        self.boards = Boards(db)
        self.votes = Votes(db)
        # What an agent remembers (docs/memory.md): its own conversation, its notes.
        self.history = History(db)
        self.memories = Memories(db)
        # Routines (docs/routines.md): their state and one row per due time.
        self.routines = Routines(db)
        # SQLite's WAL checkpoints off the loop, for the long-running writer (the fleet).
        self.checkpoints = Checkpointer(db)

    @classmethod
    def open(cls, url: str, *, on_queued: Callable[[str], None] | None = None) -> Store:
        return cls(Database(url), on_queued=on_queued)

    def transaction(self) -> Transaction | JoinedTransaction:
        """``with store.transaction() as conn``: the database's own context manager, not
        a generator around it (the pipeline enters one several times per message)."""
        return self.db.transaction()

    def cache_version(self) -> tuple[int, ...]:
        """Inside a transaction: a value that changes whenever cached groups or
        memberships may have changed: another connection's commit
        (``Database.external_version``) or a write of ours."""
        return (self.db.external_version(), self.groups.generation, self.agents.generation)

    def empty(self) -> None:
        """Delete every row but the schema's own (a bench starting afresh on one database)."""
        with self.db.transaction() as conn:
            for table in reversed(tables.METADATA.sorted_tables):
                if table.name not in ("schema_meta", "cache_version"):
                    conn.execute(table.delete())

    def ping(self) -> None:
        """Raises unless the database answers (``/readyz``): one trivial transaction."""
        with self.db.transaction() as conn:
            conn.exec_driver_sql("SELECT 1")

    def close(self) -> None:
        self.checkpoints.stop()
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
