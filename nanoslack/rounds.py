"""``round`` rooms (docs/team-rooms.md): a question to the whole room, answered at once, closed by the chief.

A human message in a round room that names no bot engages every bot of the room (the
router asks the features' ``engagement``); one that names bots engages only those. When
the gate lets the question through to an instance, that instance joins the question's
round (``allowed``, in the pipeline's transaction; the first instance to see the question
creates the round, ``waiting`` while another round of the room is under way). No pause
notice in a round room (``pause_notice``): no bot answers a bot there, so nothing pauses;
a round's answers and its dispatch reach the hop limit by design, and a notice after the
dispatch would be the round's last post. Each
member answers in its own turn, told the others answer too (``notes``); the members'
answers are room context and wake nobody (bot messages never engage in a round room).

The recorder reports each member's finished turn (``turn_recorded``). A poll (``tick``,
every instance's scheduler, once a second) finds a round whose members have all finished
and whose answers have all reached Slack: the one whose guarded move lands gives the
chief its closing brief (a pending message with every answer, so the dispatch is the
round's last post) or, without a chief, closes the round; the room's next waiting
question then starts its round. The chief's turn on the brief closes the round. An
owner's 🛑 stops the round under way (``stop``): nobody still answering posts, the chief
does not close.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from nanoslack.features import Engagement, RoomFeature
from nanoslack.halts import Halts
from nanoslack.inbound import FLEET_SENDER, Inbound, InboxKey, ThreadKey
from nanoslack.logs import get_logger
from nanoslack.store import MemberRow, MessageRow, RoomRow, RoundRow, Store

log = get_logger(__name__)

ROUND = "round"
# A round waits this long after its question for every member to join before it may close.
SETTLE_S = 2.0
# A member listed for the room that never joins (offline, halted) is not waited for past this.
JOIN_WAIT_S = 60.0
NO_CHIEF = "round room without a chief"
BRIEF = (
    '[round] Everyone has answered {asker}\'s question: "{question}"\n'
    "{answers}\n"
    "Close the round with a dispatch: one line per task, `✓ <task> → @<name> · <when>`, "
    "then the one thing that needs {asker}, if any."
)
# What a message in a round room is to a member (``RoundsFeature.engagement``).
_BOT_ANSWER = Engagement(False, "round answers are room context")
_MENTIONED = Engagement(True, "mention", addressed=True)
_NOT_NAMED = Engagement(False, "not mentioned", addressed=True)
_EVERYONE = Engagement(True, ROUND, addressed=True)
TOGETHER = "Everyone in this room answers this question at once, each for their own part{close}."
ADDRESSED = "{asker} addressed this to you directly{others}: answer in full."


def chief_of(room: RoomRow, chief: str | None) -> str | None:
    """The room's chief: ``NANOSLACK_CHIEF`` when it is one of the room's bots (or the
    room's bots are not known)."""
    if chief is None or (room.members and chief not in room.members):
        return None
    return chief


def named_bots(msg: Inbound, room: RoomRow, known_bots: frozenset[str]) -> list[str]:
    """The bot user ids a message names: the room's bots (``open-room`` wrote them), or
    any user known as a bot."""
    bots = set(room.member_users) | known_bots
    return [user for user in msg.mentions if user in bots]


class RoundsFeature(RoomFeature):
    """Rounds of ``round`` rooms, as a room feature (``nanoslack.features``): who a question
    engages and the round it joins, no pause notice, a member's notes, a member's finish,
    the close on each poll and the stop at a halt."""

    def __init__(self, store: Store, *, instance: str, chief: str | None) -> None:
        self._store = store
        self._halts = Halts(store)
        self.instance = instance
        self._chief = chief

    # -- the pipeline ----------------------------------------------------------------------

    def engagement(self, msg: Inbound, room: RoomRow, *, bot_user_id: str) -> Engagement | None:
        """In a round room: a person's question is for every bot of the room (each needs
        its messaging group for the gate), unless it names bots; a bot's answer is context."""
        if room.kind != ROUND:
            return None
        if msg.is_bot:
            return _BOT_ANSWER
        if msg.mentions_user(bot_user_id):
            return _MENTIONED
        if named_bots(msg, room, self._known_bots()):
            return _NOT_NAMED
        return _EVERYONE

    def allowed(self, msg: Inbound, room: RoomRow | None, reason: str) -> None:
        """The gate let a question in a round room through to this instance: it answers
        in the question's round."""
        if room is None or room.kind != ROUND:
            return
        named = reason != ROUND
        chief = chief_of(room, self._chief)
        if named and chief is not None and not self._chief_named(msg, room, chief):
            chief = None  # the chief closes a named round only when it was named too
        question = self._store.rounds.ask(
            room=msg.channel,
            thread_key=msg.thread_key or msg.ts,
            question_ts=msg.ts,
            question=msg.text,
            named=named,
            chief=chief,
        )
        self._store.rounds.join(question.id, self.instance)

    def _chief_named(self, msg: Inbound, room: RoomRow, chief: str) -> bool:
        users = dict(zip(room.members, room.member_users, strict=False))
        return users.get(chief) in msg.mentions

    def _known_bots(self) -> frozenset[str]:
        return self._store.users.bot_user_ids()

    # -- the turns -------------------------------------------------------------------------

    def held(self) -> frozenset[tuple[str, str]]:
        """Questions whose round waits for the room's round under way (no turn answers them yet)."""
        return self._store.rounds.waiting()

    def notes(self, instance: str, key: ThreadKey, msgs: Sequence[MessageRow]) -> list[str]:
        """What a member is told about the round it answers."""
        for msg in msgs:
            found = self._store.rounds.of_question(msg.channel, msg.ts)
            if found is None:
                continue
            if not found.named:
                close = f"; {found.chief} closes the round with a dispatch" if found.chief else ""
                return [TOGETHER.format(close=close)]
            others = [m.instance for m in self._store.rounds.members(found.id) if m.instance != instance]
            also = f" (and to {', '.join(others)})" if others else ""
            return [ADDRESSED.format(asker=self._name(msg.sender_id), others=also)]
        return []

    def turn_recorded(self, instance: str, msgs: Sequence[MessageRow], turn_id: int, status: str) -> None:
        """Inside the turn's transaction: a member finished, or the chief closed."""
        for msg in msgs:
            found = self._store.rounds.of_question(msg.channel, msg.ts)
            if found is not None:
                self._store.rounds.finish_member(found.id, instance, status=status, turn_id=turn_id)
            closed = self._store.rounds.of_close(msg.channel, msg.ts)
            if closed is not None and self._store.rounds.move(closed.id, "closing", "closed"):
                log.info("round closed", instance=instance, room=closed.room, round=closed.id)
                self._store.rounds.open_next(closed.room)

    # -- the poll --------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> list[str]:
        """Close what is answered, start what waits; the chiefs given a brief (to wake)."""
        now = time.time() if now is None else now
        briefed: list[str] = []
        for found in self._store.rounds.under_way():
            if found.status == "open" and self._answered(found, now):
                chief = self._close(found)
                if chief is not None:
                    briefed.append(chief)
        for room in self._store.rounds.rooms_to_open():
            if not self._halts.is_halted(room):
                self._store.rounds.open_next(room)
        return briefed

    def _answered(self, found: RoundRow, now: float) -> bool:
        if now - found.created_at < SETTLE_S:
            return False
        members = self._store.rounds.members(found.id)
        if not members or not all(m.finished for m in members):
            return False
        if not found.named and now - found.created_at < JOIN_WAIT_S:
            listed = self._store.room_kinds.get(found.room).members
            if set(listed) - {m.instance for m in members}:
                return False  # a bot of the room has not joined yet
        replies = self._store.outbox.replies_of([m.turn_id for m in members if m.turn_id is not None])
        return all(status not in ("queued", "sending") for _, _, status in replies)

    def _close(self, found: RoundRow) -> str | None:
        """The one caller whose move lands closes the round: the chief's brief, or done."""
        with self._store.transaction():
            if found.chief is None:
                if self._store.rounds.move(found.id, "open", "closed"):
                    log.info(
                        "round closed", instance=self.instance, room=found.room, round=found.id, chief=None
                    )
                    self._store.rounds.open_next(found.room)
                return None
            if not self._store.rounds.move(found.id, "open", "closing"):
                return None
            members = self._store.rounds.members(found.id)
            ts = self._store.messages.add_internal(
                instance=found.chief,
                channel=found.room,
                thread_key=found.thread_key,
                sender_id=FLEET_SENDER,
                text=self._brief(found, members),
                depth=0,
            )
            self._store.rounds.set_close(found.id, ts)
        log.info("round answered", instance=self.instance, room=found.room, round=found.id, chief=found.chief)
        return found.chief

    def _brief(self, found: RoundRow, members: Iterable[MemberRow]) -> str:
        members = list(members)
        texts: dict[int, list[str]] = {}
        for turn_id, text, status in self._store.outbox.replies_of([m.turn_id for m in members if m.turn_id]):
            if status == "sent":
                texts.setdefault(turn_id, []).append(" ".join(text.split()))
        lines = []
        for member in members:
            said = texts.get(member.turn_id or -1)
            lines.append(
                f"- {member.instance}: {' / '.join(said)}"
                if said
                else f"- {member.instance}: ({_quiet(member)})"
            )
        asker = self._asker(found)
        return BRIEF.format(asker=asker, question=" ".join(found.question.split()), answers="\n".join(lines))

    def _asker(self, found: RoundRow) -> str:
        for instance in (found.chief, self.instance):
            if instance is None:
                continue
            row = self._store.messages.get(InboxKey(instance, found.room, found.question_ts))
            if row is not None:
                return self._name(row.sender_id)
        return "the human"

    def _name(self, sender_id: str) -> str:
        user = self._store.users.get(sender_id)
        return (
            user.display_name if user is not None and user.display_name else sender_id.removeprefix("slack:")
        )

    # -- room control ----------------------------------------------------------------------

    def pause_notice(self, room: RoomRow, text: str) -> str | None:
        """None in a round room: nothing pauses there (the module's docstring)."""
        return None if room.kind == ROUND else text

    def halted(self, room: str) -> None:
        """Inside the halting transaction: the round under way ends, and nothing of it runs
        or posts after the resume."""
        for round_id in self._store.rounds.stop(room):
            found = self._store.rounds.get(round_id)
            if found is None:
                continue
            self._store.messages.consume_everyones(
                room, [ts for ts in (found.question_ts, found.close_ts) if ts]
            )
            cancelled = self._store.outbox.cancel_replies(room, found.thread_key)
            log.info(
                "round stopped",
                instance=self.instance,
                room=room,
                round=round_id,
                replies_cancelled=cancelled,
            )


def _quiet(member: MemberRow) -> str:
    return {"silent": "stayed silent", "failed": "failed", "budget": "out of budget"}.get(
        member.status, "said nothing"
    )


def warn_chiefless(rooms: Iterable[RoomRow], chief: str | None) -> None:
    """At start: a round room without a chief runs its rounds without the close."""
    for room in rooms:
        if room.kind == ROUND and chief_of(room, chief) is None:
            reason = (
                "NANOSLACK_CHIEF is not set" if chief is None else f"{chief} is not one of the room's bots"
            )
            log.warning(NO_CHIEF, room=room.channel, reason=reason)
