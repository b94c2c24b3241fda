"""The turn stage (DESIGN §5, step 9 of §3): wake the instance's agent and record its reply.

The pipeline leaves allowed messages ``pending`` in the store; this dispatcher, one
per instance, turns them into turns:

- woken by the pipeline (``on_pending``), by an approval click, and by a short poll
  (an approval made by ``nanoslack senders approve`` in another process only shows
  up in the store);
- one turn at a time per (instance, thread): messages that arrive during a turn, or
  that piled up while the fleet was down, are answered together by the next one;
  turns of different threads and instances run concurrently, under a fleet-wide cap;
- the agent sees the thread since this instance's last turn there (room context
  included, never held or refused messages), its own earlier posts among them;
- the agent's output is recorded in ONE transaction: the turn row, its messages
  marked ``done`` and one outbox row per post. The poster sends those rows; each post
  carries its outbox key in Slack metadata, so a crash after Slack took a post but
  before it was marked sent is reconciled from history, never posted twice. A crash
  before the output is recorded leaves the messages pending and the turn
  ``running``; the next start marks it ``abandoned`` and the turn runs again.

Room control: a halted room starts no turn and its turns under way are cancelled
(``halt``; also noticed on every poll, for a halt made by another process), and a
turn whose room was halted while the agent answered records nothing but its row
(``halted``): the messages stay pending. A room whose token budget is spent
(``RoomBudget``) waits for an owner's answer the same way. A post that is only an
acknowledgement or a silence marker is dropped (``ack filtered``).

No bolt here: names of room members come through ``RoomDirectory``, which the Slack
edge implements.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nanoslack import failpoints
from nanoslack.agents import Agent, BudgetExhausted, Line, Teammate, Turn, TurnFailed
from nanoslack.budgets import RoomBudget
from nanoslack.control import ACK_FILTERED, is_acknowledgement
from nanoslack.inbound import Identity
from nanoslack.logs import get_logger
from nanoslack.replies import prepare_posts
from nanoslack.store import MessageRow, Store
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

TURN_EVENT = "nanoslack_turn"
CRASH_BACKOFF_S = 5.0
BUDGET_TEXT = "I've used up today's token budget, so I'll stay quiet until tomorrow."
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


class RoomDirectory(Protocol):
    """What the edge knows about a conversation's people."""

    async def member_names(self, channel: str) -> tuple[str, ...]: ...

    def name_of_user(self, slack_user_id: str) -> str | None: ...


@dataclass(frozen=True)
class TurnOptions:
    poll_interval: float = 1.0
    max_posts: int = 3


@dataclass(frozen=True, slots=True)
class ThreadKey:
    channel: str
    thread_key: str  # "" in DMs


class TurnDispatcher:
    def __init__(
        self,
        *,
        identity: Identity,
        store: Store,
        agent: Agent,
        teammate: Teammate,
        skills_dir: Path,
        directory: RoomDirectory,
        siblings: Callable[[], Mapping[str, str]],
        limiter: asyncio.Semaphore,
        on_posts: Callable[[], None] | None = None,
        options: TurnOptions | None = None,
        budget: RoomBudget | None = None,
    ) -> None:
        self.identity = identity
        self.instance = identity.instance
        self._store = store
        self._agent = agent
        self._teammate = teammate
        self._skills_dir = skills_dir
        self._directory = directory
        self._siblings = siblings
        self._limiter = limiter
        self._on_posts = on_posts
        self._options = options or TurnOptions()
        self.budget = budget  # the edge answers budget clicks through it
        self._wake = asyncio.Event()
        self._busy: dict[ThreadKey, asyncio.Task[None]] = {}
        self._closing = False
        # Turns cancelled because their room was halted (not a shutdown).
        self._halting: set[ThreadKey] = set()

    def wake(self) -> None:
        self._wake.set()

    def recover(self) -> int:
        """At start: turns a previous run left ``running`` run again."""
        abandoned = self._store.turns.abandon_running(self.instance)
        self._wake.set()  # what piled up while the fleet was down: at once, not at the first poll
        if abandoned:
            log.info("turns abandoned by a previous run", instance=self.instance, count=abandoned)
        return abandoned

    async def run(self) -> None:
        me = asyncio.current_task()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._options.poll_interval)
                # Python 3.11's wait_for swallows a cancel that lands as the wake
                # event fires (gh-86296): stop() would then wait for this loop forever.
                if me is not None and me.cancelling():
                    raise asyncio.CancelledError
                self._wake.clear()
                self._schedule()
        finally:
            for task in list(self._busy.values()):
                task.cancel()

    async def close(self, within: float) -> None:
        """Start no new turn; give the turns under way ``within`` seconds to record
        their output, then cancel the rest (they run again at the next start)."""
        self._closing = True
        tasks = list(self._busy.values())
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=within)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=within)

    def halt(self, channel: str) -> None:
        """The room was halted: cancel its turns under way; their messages stay pending."""
        for key, task in list(self._busy.items()):
            if key.channel == channel and key not in self._halting:
                self._halting.add(key)
                task.cancel()

    def _schedule(self) -> None:
        if self._closing:
            return
        # Read on every poll: a halt made by another process (or the CLI) shows up here.
        halted = self._store.rooms.halted_rooms()
        for channel in halted:
            self.halt(channel)
        for key, msgs in _by_thread(self._store.messages.pending(self.instance)).items():
            if key in self._busy or key.channel in halted or self._over_budget(key):
                continue  # answered by the next turn, once this one is recorded (or resumed)
            task = asyncio.create_task(self._turn(key, msgs), name=f"{self.instance}-turn")
            self._busy[key] = task
            task.add_done_callback(functools.partial(self._turn_ended, key))

    def _over_budget(self, key: ThreadKey) -> bool:
        """A room whose daily token budget is spent waits for an owner's answer."""
        if self.budget is None or not key.thread_key:
            return False
        over = self.budget.exhausted(key.channel)
        if self.budget.take_posted() and self._on_posts is not None:
            self._on_posts()
        return over

    def _turn_ended(self, key: ThreadKey, _task: asyncio.Task[None]) -> None:
        self._busy.pop(key, None)
        self._halting.discard(key)
        self._wake.set()  # messages that came in during the turn

    async def _turn(self, key: ThreadKey, msgs: list[MessageRow]) -> None:
        try:
            await self._run_turn(key, msgs)
        except Exception as exc:  # the store or the edge failed: the messages stay pending
            log.error(
                "turn crashed",
                instance=self.instance,
                channel=key.channel,
                error=f"{type(exc).__name__}: {exc}",
            )
            # Keep the thread busy a while: the next poll would only fail the same way.
            await asyncio.sleep(CRASH_BACKOFF_S)

    async def _run_turn(self, key: ThreadKey, msgs: list[MessageRow]) -> None:
        async with self._limiter:
            turn = await self._build(key, msgs)
            turn_id = self._store.turns.start(
                instance=self.instance,
                channel=key.channel,
                thread_key=key.thread_key,
                reply_thread_ts=turn.thread_ts,
                sender_id=turn.sender_id,
                through_ts=msgs[-1].ts,
                messages=len(msgs),
                wrapping_up=turn.wrapping_up,
            )
            log.info(
                "turn started",
                instance=self.instance,
                turn=turn_id,
                channel=key.channel,
                thread=turn.thread_ts,
                messages=len(msgs),
                wrapping_up=turn.wrapping_up,
            )
            try:
                reply = await self._agent.run(turn)
            except asyncio.CancelledError:
                if key in self._halting:
                    self._record_halted(turn_id)
                raise
            except BudgetExhausted as exc:
                self._record_budget(turn_id, turn, msgs, str(exc))
            except TurnFailed as exc:
                self._record_failure(turn_id, msgs, str(exc))
            except Exception as exc:  # a back-end bug must not stop the instance
                self._record_failure(turn_id, msgs, f"{type(exc).__name__}: {exc}")
            else:
                self._record_reply(turn_id, turn, msgs, reply.posts, reply.tokens)

    async def _build(self, key: ThreadKey, msgs: list[MessageRow]) -> Turn:
        since = self._store.turns.last_through(self.instance, key.channel, key.thread_key)
        rows = self._store.messages.thread(self.instance, key.channel, key.thread_key, since)
        waking = msgs[-1]
        reply_thread = key.thread_key  # the waking message's thread; "" in a DM
        transcript = [self._line(row) for row in rows]
        transcript += self._own_posts(key, reply_thread, since)
        transcript.sort(key=lambda line: float(line.ts or 0))
        # Not in Slack yet, so they will land after everything stored so far.
        transcript += self._unsent_posts(key, reply_thread)
        members = await self._directory.member_names(key.channel)
        return Turn(
            instance=self.instance,
            # The instance name, not Slack's display name: it is what siblings write
            # as @name and what replies.link_mentions turns into a real mention.
            name=self.instance,
            channel=key.channel,
            thread_ts=reply_thread,
            sender_id=waking.sender_id,
            wrapping_up=any(m.hop_limit > 0 and m.hop >= m.hop_limit for m in msgs),
            room=_room_label(key),
            members=members,
            transcript=tuple(transcript),
            system=self._teammate.system_prompt(self._skills_dir),
        )

    def _line(self, row: MessageRow) -> Line:
        return Line(
            ts=row.ts,
            sender_id=row.sender_id,
            sender_name=self._name(row.sender_id),
            text=self._readable(row.text),
        )

    def _own_posts(self, key: ThreadKey, reply_thread: str, since: str | None) -> list[Line]:
        me = f"slack:bot:{self.identity.bot_id}" if self.identity.bot_id else self.instance
        return [
            Line(ts=ts, sender_id=me, sender_name=self.instance, text=self._readable(text))
            for ts, text in self._store.outbox.sent_posts(self.instance, key.channel, reply_thread, since)
        ]

    def _unsent_posts(self, key: ThreadKey, reply_thread: str) -> list[Line]:
        me = f"slack:bot:{self.identity.bot_id}" if self.identity.bot_id else self.instance
        return [
            Line(ts="", sender_id=me, sender_name=self.instance, text=self._readable(text))
            for text in self._store.turns.unsent_posts(self.instance, key.channel, reply_thread)
        ]

    def _name(self, sender_id: str) -> str:
        user = self._store.users.get(sender_id)
        if user is not None and user.display_name:
            return user.display_name
        return sender_id.removeprefix("slack:bot:").removeprefix("slack:")

    def _readable(self, text: str) -> str:
        """``<@U0ELI>`` → ``@eli``: the agent addresses people by name."""

        def name(m: re.Match[str]) -> str:
            found = self._directory.name_of_user(m.group(1))
            return f"@{found}" if found else m.group(0)

        return _MENTION.sub(name, text)

    # -- recording the outcome ------------------------------------------------------------

    def _record_reply(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], posts: Sequence[str], tokens: int
    ) -> None:
        posts = self._without_acknowledgements(turn_id, posts)
        texts = prepare_posts(posts, self._siblings(), max_posts=self._options.max_posts)
        if len(posts) > self._options.max_posts:
            log.info("turn posts capped", instance=self.instance, turn=turn_id, asked=len(posts))
        with self._store.transaction():
            if self._store.rooms.is_halted(turn.channel):
                # Halted while the agent was answering: nothing is posted, the
                # messages stay pending for the turn that runs after the resume.
                self._store.turns.finish(turn_id, "halted", tokens=tokens)
                log.info("turn halted", instance=self.instance, turn=turn_id, channel=turn.channel)
                return
            if not self._store.turns.finish(
                turn_id, "done" if texts else "silent", posts=len(texts), tokens=tokens
            ):
                return
            self._close(msgs)
            for i, text in enumerate(texts):
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"turn:{self.instance}:{turn_id}:{i}",
                    channel=turn.channel,
                    thread_ts=turn.thread_ts or None,
                    text=text,
                    metadata={"event_type": TURN_EVENT, "event_payload": {"turn": turn_id, "part": i}},
                )
        failpoints.hit("turn.recorded")
        log.info(
            "turn finished" if texts else "turn silent",
            instance=self.instance,
            turn=turn_id,
            posts=len(texts),
            tokens=tokens,
        )
        if texts and self._on_posts is not None:
            self._on_posts()

    def _record_halted(self, turn_id: int) -> None:
        self._store.turns.finish(turn_id, "halted")
        log.info("turn halted", instance=self.instance, turn=turn_id, reason="room halted")

    def _without_acknowledgements(self, turn_id: int, posts: Sequence[str]) -> list[str]:
        """A post that only says "Acknowledged." or ``*(silent)*`` is silence."""
        kept = [post for post in posts if not is_acknowledgement(post)]
        if len(kept) < len(posts):
            log.info(ACK_FILTERED, instance=self.instance, turn=turn_id, dropped=len(posts) - len(kept))
        return kept

    def _record_failure(self, turn_id: int, msgs: Sequence[MessageRow], error: str) -> None:
        # The messages are consumed: a back end that fails on them would fail again
        # on every poll. The turn row keeps the error for `nanoslack turns`.
        with self._store.transaction():
            self._store.turns.finish(turn_id, "failed", error=error)
            self._close(msgs)
        log.warning("turn failed", instance=self.instance, turn=turn_id, error=error)

    def _record_budget(self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], error: str) -> None:
        thread = turn.thread_ts or turn.channel
        with self._store.transaction():
            self._store.turns.finish(turn_id, "budget", error=error)
            self._close(msgs)
            # Told once per thread and day, not once per message.
            told = self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=f"budget:{self.instance}:{turn.channel}:{thread}:{utc_day()}",
                channel=turn.channel,
                thread_ts=turn.thread_ts or None,
                text=BUDGET_TEXT,
            )
        log.warning("turn refused: daily token budget spent", instance=self.instance, turn=turn_id)
        if self.budget is not None:
            self.budget.instance_exhausted()  # the owners may allow one more day's worth
        asked = self.budget is not None and self.budget.take_posted()
        if (told is not None or asked) and self._on_posts is not None:
            self._on_posts()

    def _close(self, msgs: Sequence[MessageRow]) -> None:
        self._store.messages.set_statuses([m.key for m in msgs], "done", from_status="pending")


def _by_thread(rows: Sequence[MessageRow]) -> dict[ThreadKey, list[MessageRow]]:
    threads: dict[ThreadKey, list[MessageRow]] = {}
    for row in rows:  # ordered by ts
        threads.setdefault(ThreadKey(row.channel, row.thread_key), []).append(row)
    return threads


def _room_label(key: ThreadKey) -> str:
    return "DM" if not key.thread_key else f'Group chat: "{key.channel}"'


class StoreLedger:
    """The LLM back ends' token ledger (``agents.TokenLedger``), kept in the store so
    a restart does not refill a spent daily budget."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def used_today(self, instance: str) -> int:
        # An owner's "Allow 1× more" forgives what was spent before it (budgets.py).
        forgiven = self._store.rooms.grant("instance", instance, utc_day()).allowed
        return max(0, self._store.turns.used_today(instance) - forgiven)

    def add(self, instance: str, tokens: int) -> None:
        self._store.turns.add_usage(instance, tokens)
