"""How a turn ends, in the store (docs/agents.md, docs/architecture.md): one transaction per outcome.

A reply: the turn row, its messages marked ``done``, one outbox row per post
(``purpose = 'reply'``: what the agent sent with ``send_message``, then what a command
printed) and per file it sent (``send_file``, ``kind = file``), its handoffs (a pending
message for each recipient, in this thread) and its
DMs to the owners commit together, so a crash leaves either all of it or a turn still
``running`` that the next start runs again. A room halted while the agent answered
records only the turn row (``halted``; the messages stay pending); one a person stopped
is ``stopped``, its messages consumed and ``Stopped.`` queued. A failed turn
consumes its messages (they would fail again on every poll). A turn stopped by a
spent budget (tokens or dollars) keeps what it had done and tells the thread once a day; for the
instance's daily cap it asks the owners (the room's budget asks for itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nanoslack import failpoints, tracing
from nanoslack.agents import Reply, SeenFile, Turn
from nanoslack.budgets import UNITS, USD, InstanceBudget
from nanoslack.control import ACK_FILTERED, is_acknowledgement
from nanoslack.features import RoomFeature
from nanoslack.halts import Halts
from nanoslack.inbound import FileRef, Identity, bot_sender_id, file_label
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.replies import MAX_CHARS, MAX_POSTS, link_mentions, prepare_posts, quiet_broadcasts
from nanoslack.services import Services
from nanoslack.store import MessageRow
from nanoslack.store.turns import utc_day
from nanoslack.tools import FileOut, Handoff, TurnEffects
from nanoslack.tools.host import react_target
from nanoslack.tools.memory import note_changes
from nanoslack.turns.history import Recall, ThreadMemory

log = get_logger(__name__)

BUDGET_TEXT = "I've used up today's token budget, so I'll stay quiet until tomorrow."
BUDGET_USD_TEXT = "I've used up today's dollar budget, so I'll stay quiet until tomorrow."
STOPPED_TEXT = "Stopped."
HANDOFF_TEXT = "[agent] A message just arrived from {sender} (in {room}): {message}"
# A routine's run that handed off but wrote nothing: its post, whose thread the answer goes to
# (docs/routines.md). The names are plain words: a mention would wake the teammate twice.
HANDED_TEXT = "Handed to {names}; the answer follows in this thread."

# How a turn no message woke ended, inside its transaction: (status, reason, tokens).
SourcedEnded = Callable[[str, str, int], None]


class TurnRecorder:
    def __init__(
        self,
        services: Services,
        *,
        identity: Identity,
        halts: Halts,
        features: Sequence[RoomFeature],
        budget: InstanceBudget | None = None,
        memory: ThreadMemory | None = None,
        tally: Tally | None = None,
    ) -> None:
        instance = self.instance = identity.instance
        self._tally = tally or Tally()
        self._store = services.store
        self._halts = halts
        # Every running instance's bot user: ``@name`` in a reply becomes a mention.
        self._siblings = services.siblings
        self._budget = budget
        self._owners = services.owners
        # Who a handoff is from, as the recipient's transcript names it.
        bot_id = identity.bot_id
        self._sender_id = bot_sender_id(bot_id) if bot_id else f"slack:bot:{instance}"
        self._allow_broadcast = services.tools.allow_broadcast
        # Wakes the recipient of a handoff (when this process runs it).
        self._on_handoff = services.wake
        # The room features (``nanoslack.features``): inside the recording transaction, what
        # a turn's tools meant to do (``apply``) and how it ended (``turn_recorded``).
        self._features = tuple(features)
        self._memory = memory
        # How long one DM reply may be before it is split (longer when DM replies stream).
        self._dm_reply_chars = services.dm_reply_chars

    def reply(
        self,
        turn_id: int,
        turn: Turn,
        msgs: Sequence[MessageRow],
        reply: Reply,
        effects: TurnEffects,
        recall: Recall | None = None,
    ) -> None:
        posts = self._without_acknowledgements(turn_id, [*effects.posts, *reply.posts])
        if len(posts) > MAX_POSTS:
            log.info("turn posts capped", instance=self.instance, turn=turn_id, asked=len(posts))
        max_chars = MAX_CHARS if turn.thread_ts else self._dm_reply_chars
        texts = prepare_posts(
            posts, self._siblings(), max_chars=max_chars, allow_broadcast=self._allow_broadcast
        )
        with self._store.transaction():
            if self._halts.is_halted(turn.channel):
                # Halted while the agent was answering: nothing is posted, the
                # messages stay pending for the turn that runs after the resume.
                self._store.turns.finish(turn_id, "halted")
                self._ended("halted")
                log.info("turn halted", instance=self.instance, turn=turn_id, channel=turn.channel)
                return
            status = "done" if texts or effects.handoffs or effects.files else "silent"
            if not self._store.turns.finish(turn_id, status, posts=len(texts) + len(effects.files)):
                return
            self._close(msgs)
            self._recorded(msgs, turn_id, status)
            self._files(turn_id, turn, effects.files)
            self._posts(turn_id, turn, texts)
            self._side_effects(turn_id, turn, msgs, effects)
            self._remember(recall, turn_id, turn, texts, effects, reply)
        self._ended(status, effects.tokens, effects.cached_tokens, effects.cost_usd)
        failpoints.hit("turn.recorded")
        log.info(
            "turn finished" if texts or effects.files else "turn silent",
            instance=self.instance,
            turn=turn_id,
            posts=len(texts),
            files=len(effects.files),
            handoffs=len(effects.handoffs),
        )
        self._woke(effects.handoffs)

    def _posts(self, turn_id: int, turn: Turn, texts: Sequence[str]) -> None:
        for i, text in enumerate(texts):
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=self._post_key(turn_id, i),
                purpose="reply",
                turn_id=turn_id,
                channel=turn.channel,
                thread_ts=turn.thread_ts or None,
                text=text,
            )

    def _post_key(self, turn_id: int, i: int) -> str:
        """The outbox key of the turn's ``i``-th post."""
        return f"turn:{self.instance}:{turn_id}:{i}"

    def _files(self, turn_id: int, turn: Turn, files: Sequence[FileOut]) -> None:
        """``send_file``: each file an outbox row (``kind = file``) that the poster uploads into
        the thread, exactly once (docs/agents.md); one of the turn's posts. Queued before the
        turn's messages, so the file is there when the words about it ("the report is
        attached") are read."""
        for i, f in enumerate(files):
            comment = f.comment if self._allow_broadcast else quiet_broadcasts(f.comment)
            self._store.outbox.enqueue_file(
                instance=self.instance,
                dedupe_key=f"file:{self.instance}:{turn_id}:{i}",
                turn_id=turn_id,
                channel=turn.channel,
                thread_ts=turn.thread_ts or None,
                filename=f.filename,
                title=f.title,
                content=f.content,
                comment=link_mentions(comment, self._siblings()),
            )

    def _side_effects(
        self,
        turn_id: int,
        turn: Turn,
        msgs: Sequence[MessageRow],
        effects: TurnEffects,
        *,
        waits_on: str | None = None,
    ) -> None:
        """Inside the turn's transaction: its handoffs, its DMs to the owners, and what the
        room features' tools meant to do (``TurnEffects.acts``: reports, votes, ballots).
        ``waits_on``: the outbox key of the post whose thread the handoffs' answers go to
        (a routine's run): they wait for it."""
        depth = 1 + max((m.handoff_depth for m in msgs), default=0)
        for handoff in effects.handoffs:
            self._hand_off(turn_id, turn, handoff, depth, msgs, waits_on)
        for text in effects.owner_messages:
            text = text if self._allow_broadcast else quiet_broadcasts(text)
            for owner in self._owners:
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"owner:{self.instance}:{turn_id}:{owner}",
                    dm_user=owner,
                    text=text,
                )
        for name in effects.reactions:
            self._react(turn_id, turn, msgs, name)
        if effects.acts:
            for feature in self._features:
                feature.apply(turn_id, turn, effects)

    def _react(self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], name: str) -> None:
        """``react``: a reaction on the message the turn answered, sent by the poster like a
        post (exactly once; redoing one Slack already has is ``already_reacted``, done)."""
        target = react_target(msgs)
        if target is None:
            return
        self._store.outbox.enqueue(
            instance=self.instance,
            dedupe_key=f"react:{self.instance}:{turn_id}:{name}",
            kind="reaction",
            turn_id=turn_id,
            channel=target[0],
            update_ts=target[1],
            text=name,
        )

    def _hand_off(
        self,
        turn_id: int,
        turn: Turn,
        handoff: Handoff,
        depth: int,
        msgs: Sequence[MessageRow],
        waits_on: str | None = None,
    ) -> None:
        """The recipient's pending message, in this conversation and thread: its scheduler
        (in whichever process holds it) runs a turn for it like for any message. The files it
        passes on go with it by reference (``message_files``, the ``[file: name]`` lines in
        its text), so the recipient's turn, in any process, fetches and shows them as it would
        a person's message's. ``waits_on``: a routine's handoff, whose thread is the run's
        post's: the message waits until the poster has that post's ts
        (``Handoffs.deliver_waiting``)."""
        text = HANDOFF_TEXT.format(sender=self.instance, room=turn.room, message=handoff.text)
        text = "\n".join([text, *(file_label(f.name) for f in handoff.files)])
        # The recipient's transcript names the sender by its users row, which a bot that
        # has not posted in Slack yet does not have.
        self._store.users.ensure(self._sender_id, kind="bot", display_name=self.instance)
        thread_key = turn.thread_ts
        ts = self._store.messages.add_internal(
            instance=handoff.to,
            channel=turn.channel,
            thread_key=thread_key,
            sender_id=self._sender_id,
            text=text,
            depth=depth,
            waiting=waits_on is not None,
        )
        self._store.message_files.add_refs(
            instance=handoff.to, channel=turn.channel, ts=ts, refs=self._refs(turn, msgs, handoff.files)
        )
        self._store.handoffs.add(
            from_instance=self.instance,
            to_instance=handoff.to,
            channel=turn.channel,
            thread_key=thread_key,
            text=handoff.text,
            depth=depth,
            turn_id=turn_id,
            ts=ts,
            traceparent=handoff.traceparent,
            waits_on=waits_on,
        )
        log.info(
            "handoff recorded",
            instance=self.instance,
            turn=turn_id,
            to=handoff.to,
            depth=depth,
            files=len(handoff.files),
            waits_on=waits_on,
        )

    def _refs(self, turn: Turn, msgs: Sequence[MessageRow], files: Sequence[SeenFile]) -> list[FileRef]:
        """The stored refs (Slack's URL among them) of the files a handoff passes on, from the
        messages the turn answered; one not found there (none should be) is looked up by id
        with ``files.info`` by the recipient."""
        if not files:
            return []
        stored = self._store.message_files.of(self.instance, turn.channel, [m.ts for m in msgs])
        by_id = {ref.id: ref for refs in stored.values() for ref in refs}
        return [
            by_id.get(f.id) or FileRef(f.id, f.name, f.mimetype, f.size, "", "check_file_info") for f in files
        ]

    def _woke(self, handoffs: Sequence[Handoff]) -> None:
        for to in dict.fromkeys(h.to for h in handoffs):
            self._on_handoff(to)

    def sourced_reply(
        self,
        turn_id: int,
        turn: Turn,
        posts: Sequence[str],
        effects: TurnEffects,
        *,
        to_owners: bool,
        ended: SourcedEnded,
        stopped: str = "",
        recall: Recall | None = None,
        reply: Reply | None = None,
    ) -> None:
        """A turn no message woke (``nanoslack.features.SourcedTurn``, docs/architecture.md):
        its posts joined into one, which starts a thread of its own in the room (or goes to
        each owner's DM); its source is told how it ended in the same transaction.
        ``stopped``: why it ended early (a spent budget). Its handoffs' answers go to the
        thread of that post (docs/routines.md): a run that handed off and wrote nothing
        posts ``HANDED_TEXT``."""
        posts = self._without_acknowledgements(turn_id, [*effects.posts, *posts])
        if not posts and effects.handoffs and not to_owners:
            posts = [HANDED_TEXT.format(names=", ".join(dict.fromkeys(h.to for h in effects.handoffs)))]
        joined = ["\n\n".join(posts)] if posts else []
        texts = prepare_posts(joined, self._siblings(), allow_broadcast=self._allow_broadcast)
        with self._store.transaction():
            if not to_owners and self._halts.is_halted(turn.channel):
                self._store.turns.finish(turn_id, "halted")
                self._ended("halted")
                ended("skipped", "room halted", effects.tokens)
                log.info("turn halted", instance=self.instance, turn=turn_id, channel=turn.channel)
                return
            status = "done" if texts else "silent"
            if not self._store.turns.finish(turn_id, status, posts=len(texts), error=stopped or None):
                return
            for i, text in enumerate(texts):
                for owner in self._owners if to_owners else ("",):
                    self._store.outbox.enqueue(
                        instance=self.instance,
                        dedupe_key=self._post_key(turn_id, i) + (f":{owner}" if owner else ""),
                        purpose="reply",
                        turn_id=turn_id,
                        channel=None if owner else turn.channel,
                        dm_user=owner or None,
                        text=text,
                    )
            # Its first post starts the thread the handoffs' answers go to.
            root = self._post_key(turn_id, 0) if texts and not to_owners else None
            self._side_effects(turn_id, turn, (), effects, waits_on=root)
            self._remember(recall, turn_id, turn, texts, effects, reply)
            ended(status, stopped, effects.tokens)
        self._ended(status, effects.tokens, effects.cached_tokens, effects.cost_usd)
        log.info(
            "turn finished" if texts else "turn silent",
            instance=self.instance,
            turn=turn_id,
            origin=turn.origin.conversation if turn.origin else "",
            posts=len(texts),
        )

    def sourced_failure(self, turn_id: int, error: str, *, ended: SourcedEnded, tokens: int) -> None:
        with self._store.transaction():
            self._store.turns.finish(turn_id, "failed", error=error)
            ended("failed", error[:200], tokens)
        self._ended("failed")
        log.warning("turn failed", instance=self.instance, turn=turn_id, error=error)

    def asked(
        self, turn_id: int, turn: Turn, status: str, effects: TurnEffects, *, answer: int = 0, error: str = ""
    ) -> None:
        """A turn that answered a teammate's ask (docs/agents.md "Asking a teammate"): nothing is
        posted, so only the turn row ends (``answer``: the answer's characters, as ``posts``
        0 or 1), with what its note tools meant to do. ``cancelled``: the asker stopped waiting."""
        with self._store.transaction():
            if not self._store.turns.finish(turn_id, status, posts=0, error=error or None):
                return
            if effects.acts:
                for feature in self._features:
                    feature.apply(turn_id, turn, effects)
        self._ended(status, effects.tokens, effects.cached_tokens, effects.cost_usd)
        log.info(
            "asked turn ended",
            instance=self.instance,
            turn=turn_id,
            status=status,
            asked_by=turn.asked_by,
            answer_chars=answer,
        )

    def halted(self, turn_id: int) -> None:
        self._store.turns.finish(turn_id, "halted")
        self._ended("halted")
        log.info("turn halted", instance=self.instance, turn=turn_id, reason="room halted")

    def stopped(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], *, by_user: str, thread_ts: str | None
    ) -> None:
        """A person clicked Stop while the agent answered (docs/agent-surface.md): one
        transaction, before anything else is done about it, so a crash after it never runs
        the turn again. The turn is ``stopped`` with what it had posted (the draft Slack
        showed, kept as it stands), its messages are consumed (what came in behind them is
        answered next), and ``Stopped.`` is queued once (its outbox key is the turn's)."""
        with self._store.transaction():
            draft = self._store.reply_drafts.of_turn(self.instance, turn_id)
            posted = 1 if draft is not None and draft.ts else 0
            if not self._store.turns.finish(turn_id, "stopped", posts=posted, error=f"stopped by {by_user}"):
                return
            if draft is not None:
                self._store.reply_drafts.drop(self.instance, turn_id)  # nothing finishes it
            self._close(msgs)
            self._recorded(msgs, turn_id, "stopped")
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=f"stopped:{self.instance}:{turn_id}",
                purpose="notice",
                turn_id=turn_id,
                channel=turn.channel,
                thread_ts=thread_ts or turn.thread_ts or None,
                text=STOPPED_TEXT,
            )
        failpoints.hit("turn.stopped")
        self._ended("stopped")
        log.info("turn stopped", instance=self.instance, turn=turn_id, by=by_user, posts=posted)

    def failure(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], error: str, recall: Recall | None = None
    ) -> None:
        # The messages are consumed: a back end that fails on them would fail again
        # on every poll. The turn row keeps the error for `nanoslack turns`. What it was
        # shown stays in the thread's history, so the next turn still sees those messages.
        with self._store.transaction():
            if not self._store.turns.finish(turn_id, "failed", error=error):
                return
            self._close(msgs)
            self._recorded(msgs, turn_id, "failed")
            self._remember(recall, turn_id, turn, (), TurnEffects(), None)
        self._ended("failed")
        log.warning("turn failed", instance=self.instance, turn=turn_id, error=error)

    def budget_spent(
        self,
        turn_id: int,
        turn: Turn,
        msgs: Sequence[MessageRow],
        error: str,
        effects: TurnEffects,
        recall: Recall | None = None,
        *,
        scope: str,
        unit: str = "tokens",
    ) -> None:
        """Stopped before a model call by a spent budget (``unit``: tokens or usd): what the
        turn did until then stands (its posts, its handoffs); the thread is told once a day."""
        spent = UNITS.get(unit, UNITS["tokens"])
        posts = self._without_acknowledgements(turn_id, effects.posts)
        max_chars = MAX_CHARS if turn.thread_ts else self._dm_reply_chars
        texts = prepare_posts(
            posts, self._siblings(), max_chars=max_chars, allow_broadcast=self._allow_broadcast
        )
        thread = turn.thread_ts or turn.channel
        with self._store.transaction():
            if not self._store.turns.finish(
                turn_id, "budget", posts=len(texts) + len(effects.files), error=error
            ):
                return
            self._close(msgs)
            self._recorded(msgs, turn_id, "budget")
            self._files(turn_id, turn, effects.files)
            self._posts(turn_id, turn, texts)
            self._side_effects(turn_id, turn, msgs, effects)
            self._remember(recall, turn_id, turn, texts, effects, None)
            if scope == "instance":
                # Told once per thread and day, not once per message.
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"budget:{self.instance}:{turn.channel}:{thread}:{utc_day()}",
                    purpose="notice",
                    channel=turn.channel,
                    thread_ts=turn.thread_ts or None,
                    text=BUDGET_USD_TEXT if spent is USD else BUDGET_TEXT,
                )
        self._ended("budget", effects.tokens, effects.cached_tokens, effects.cost_usd)
        log.warning(
            f"turn refused: daily {spent.budget} spent"
            if scope == "instance"
            else "turn stopped: room budget spent",
            instance=self.instance,
            turn=turn_id,
        )
        self._woke(effects.handoffs)
        if scope == "instance" and self._budget is not None:
            self._budget.spent(spent)  # the owners may allow one more day's worth

    def _remember(
        self,
        recall: Recall | None,
        turn_id: int,
        turn: Turn,
        texts: Sequence[str],
        effects: TurnEffects,
        reply: Reply | None,
    ) -> None:
        """The turn's row of its thread's history (docs/memory.md), in its transaction."""
        if recall is None or self._memory is None:
            return
        self._memory.record(
            recall,
            turn_id=turn_id,
            turn=turn,
            # A file sent is remembered by its name (its text was the tool call's argument).
            posts=[*texts, *(f"[file: {f.filename}]" for f in effects.files)],
            messages=reply.history if reply else "",
            chars=reply.history_chars if reply else 0,
            changes=note_changes(effects),
        )

    def _without_acknowledgements(self, turn_id: int, posts: Sequence[str]) -> list[str]:
        """A post that only says "Acknowledged." or ``*(silent)*`` is silence."""
        kept = [post for post in posts if not is_acknowledgement(post)]
        if len(kept) < len(posts):
            log.info(ACK_FILTERED, instance=self.instance, turn=turn_id, dropped=len(posts) - len(kept))
        return kept

    def _ended(self, status: str, tokens: int = 0, cached_tokens: int = 0, cost_usd: float = 0.0) -> None:
        """How a turn ended, counted (``/metrics``) and named on its trace's span."""
        self._tally.turn(status, tokens, cached_tokens, cost_usd)
        tracing.turn_status(status)

    def _recorded(self, msgs: Sequence[MessageRow], turn_id: int, status: str) -> None:
        for feature in self._features:
            feature.turn_recorded(self.instance, msgs, turn_id, status)

    def _close(self, msgs: Sequence[MessageRow]) -> None:
        self._store.messages.set_statuses([m.key for m in msgs], "done", from_status="pending")
