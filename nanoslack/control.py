"""Room control (docs/operations.md): what an owner's word and a bot's small talk mean.

Text rules first: the router and the turn recorder ask ``is_acknowledgement``
(a bot's "thanks!" wakes nobody, an agent's "Acknowledged." is silence). Then the
room-control stage (``RoomControl``), which the pipeline runs before the guard: an
owner's 🛑 or bare ``stop`` halts a room (a notice there, and every owner asked
whether to resume: ``nanoslack.asks``), ``resume`` resumes it, a halted room drops
bot messages; and the pause notice the A2A policy asks for at the hop limit.
``nanoslack.halts.Halts`` is the one reader of which rooms are halted.

Acknowledgements (case, punctuation, emoji shortcodes, emoji and mentions ignored;
a message made only of these phrases, e.g. "Ok, thanks!"):
thanks, thank you, thx, ty, ok, okay, got it, acknowledged, noted, 👍 / ``:+1:``,
and the silence markers agents print instead of saying nothing: ``*(silent)*``,
``(silent)``, ``NO_REPLY``, ``[silence]``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nanoslack import mrkdwn
from nanoslack.asks import HALT, OwnerAsks, by_id, who
from nanoslack.halts import Halts
from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.store import Store

if TYPE_CHECKING:
    from nanoslack.features import RoomFeature

log = get_logger(__name__)

ACK_FILTERED = "ack filtered"
ACKNOWLEDGEMENT = "acknowledgement"

ACK_PHRASES: tuple[tuple[str, ...], ...] = tuple(
    tuple(p.split())
    for p in (
        "thank you",
        "thanks",
        "thx",
        "ty",
        "ok",
        "okay",
        "got it",
        "acknowledged",
        "noted",
        "silent",
        "silence",
        "no reply",
    )
)
HALT_WORDS = frozenset({"stop", "halt"})
RESUME_WORDS = frozenset({"resume"})
HALT_REACTIONS = frozenset({"octagonal_sign"})
# Any command word anywhere in the lowered text (one regex search, not a generator per word).
_ANY_COMMAND_WORD = re.compile("|".join(re.escape(word) for word in sorted(HALT_WORDS | RESUME_WORDS)))

_MENTION = re.compile(r"<[@!#][^>]*>")
_SHORTCODE = re.compile(r":[a-z0-9_+'-]+:", re.IGNORECASE)
# Anything that is not a letter or digit separates words: punctuation, markdown,
# emoji (👍 included), underscores (NO_REPLY → "no reply").
_NON_WORD = re.compile(r"[\W_]+")

Command = Literal["halt", "resume"]


def _words(text: str) -> list[str]:
    text = _MENTION.sub(" ", text)
    text = _SHORTCODE.sub(" ", text)
    return _NON_WORD.sub(" ", text).lower().split()


def is_acknowledgement(text: str) -> bool:
    """True when ``text`` says nothing but an acknowledgement or a silence marker.

    Empty text is not one (a bare file share says something); text made only of
    emoji, shortcodes and mentions is (a 👍 or ``:+1:`` alone).
    """
    if not text.strip():
        return False
    words = _words(text)
    while words:
        for phrase in ACK_PHRASES:
            if tuple(words[: len(phrase)]) == phrase:
                words = words[len(phrase) :]
                break
        else:
            return False
    return True


def command_of(text: str) -> Command | None:
    """``stop`` / ``halt`` / ``resume`` alone (any case, mentions and punctuation aside)."""
    lowered = text.lower()
    if not _ANY_COMMAND_WORD.search(lowered):
        return None  # every owner message in a room asks: most name no command at all
    words = _words(text)
    if len(words) != 1:
        return None
    if words[0] in HALT_WORDS:
        return "halt"
    if words[0] in RESUME_WORDS:
        return "resume"
    return None


# -- the room-control stage ------------------------------------------------------------------

HALTED = "room halted"
RESUMED = "room resumed"
REACTION_EVENT = "reaction_added"
PAUSE_TEXT = "⏸️ Paused after {n} bot messages — a human message resumes."
HALT_TEXT = (
    "🛑 Halted by {who}: the bots stay quiet here until an owner resumes"
    " (the *Resume* button in their DM, or `resume` here)."
)
HALT_DM_TEXT = "🛑 {who} halted {room}. The bots there stay quiet until you resume it."
RESUME_TEXT = "▶️ Resumed by {who}."

Effect = Literal["halted", "resumed"]


@dataclass(frozen=True, slots=True)
class Control:
    """The room-control stage's answer for a message it took: never routed further."""

    status: Literal["processed", "dropped"]
    reason: str
    effect: Effect | None = None  # what the instance must do after the commit


class RoomControl:
    """Runs before the guard, inside the batch transaction; the A2A policy calls
    ``hop_limit_reached`` in the same transaction as the failed hop reservation.

    An owner's ``stop`` is taken here so it never reaches the guard's human
    observer: a halt must not reset the hop counts it is meant to freeze.
    """

    def __init__(
        self, store: Store, asks: OwnerAsks, halts: Halts, *, features: Sequence[RoomFeature] = ()
    ) -> None:
        self._store = store
        self._asks = asks
        self.halts = halts
        self._features = tuple(features)
        self.instance = asks.instance

    def decide(self, msg: Inbound) -> Control | None:
        """None: not a room-control matter, the guard goes on with it."""
        if msg.event_type == REACTION_EVENT:
            return self._reaction(msg)
        if msg.is_bot:
            if self.halts.is_halted(msg.channel):
                log.info(
                    "bot message dropped",
                    instance=self.instance,
                    channel=msg.channel,
                    ts=msg.ts,
                    reason=HALTED,
                )
                return Control("dropped", HALTED)
            return None
        if msg.is_dm or not self._asks.is_owner(msg.user):
            return None
        command = command_of(msg.text)
        if command == "halt":
            return self.halt(msg.channel, by_user=str(msg.user))
        if command == "resume" and self.resume(msg.channel, by_user=str(msg.user)):
            return Control("processed", RESUMED, "resumed")
        return None  # "resume" in a running room is just a word

    def _reaction(self, msg: Inbound) -> Control:
        if msg.reaction in HALT_REACTIONS and self._asks.is_owner(msg.user) and not msg.is_dm:
            return self.halt(msg.channel, by_user=str(msg.user))
        # A reaction to one of our posts reaches that thread's next turn and wakes nothing
        # (docs/agents.md).
        if msg.reaction and msg.item_ts and msg.user:
            if self._store.reactions.record(
                self.instance, msg.channel, msg.ts, msg.user, msg.reaction, msg.item_ts
            ):
                return Control("processed", "reaction noted")
        return Control("dropped", "reaction ignored")

    def halt(self, room: str, *, by_user: str) -> Control:
        """Halt the room; only the instance whose halt landed announces it."""
        if not self._store.room_halts.halt(room, by=by_id(by_user), instance=self.instance):
            return Control("processed", "room already halted", "halted")
        for feature in self._features:
            feature.halted(room)
        halt = self.halts.get(room)
        stamp = f"{halt.halted_at:.6f}" if halt else "0"
        self._notice(f"halt:{room}:{stamp}", room, HALT_TEXT.format(who=who(by_user)))
        self._asks.open(HALT, room, HALT_DM_TEXT.format(who=who(by_user), room=mrkdwn.room(room)))
        log.info(HALTED, instance=self.instance, room=room, by=by_user)
        return Control("processed", HALTED, "halted")

    def resume(self, room: str, *, by_user: str) -> bool:
        """False when the room was not halted (a second click, a stale button)."""
        if not self._store.room_halts.resume(room):
            return False
        text = RESUME_TEXT.format(who=who(by_user))
        self._notice(f"resume:{room}:{time.time():.6f}", room, text)
        # Every owner's Resume button becomes who resumed.
        self._asks.close(HALT, room, choice="resume", by_user=by_user, verdict=text)
        log.info(RESUMED, instance=self.instance, room=room, by=by_user)
        return True

    def hop_limit_reached(self, msg: Inbound, max_hops: int) -> None:
        """One pause notice per pause: the epoch is the last human message this
        instance saw in the room, so every instance that hits the limit before the
        next human message writes the same outbox key, and only the first row lands.

        The room's features may change the notice or leave it out
        (``RoomFeature.pause_notice``: a room where nothing pauses, docs/team-rooms.md)."""
        text = PAUSE_TEXT.format(n=max_hops)
        if self._features:
            room = self._store.room_kinds.get(msg.channel)
            for feature in self._features:
                changed = feature.pause_notice(room, text)
                if changed is None:
                    log.debug(
                        "pause notice skipped",
                        instance=self.instance,
                        room=msg.channel,
                        feature=type(feature).__name__,
                    )
                    return
                text = changed
        epoch = self._store.messages.last_human_ts(self.instance, msg.channel)
        if self._notice(f"pause:{msg.channel}:{epoch}", msg.channel, text, msg.thread_ts or msg.ts):
            log.info("pause notice", instance=self.instance, room=msg.channel, max=max_hops, epoch=epoch)

    def _notice(self, key: str, room: str, text: str, thread_ts: str | None = None) -> bool:
        """A notice in the room (marked as the fleet's, so no bot answers it); False when
        this key was posted before."""
        queued = self._store.outbox.enqueue(
            instance=self.instance,
            dedupe_key=key,
            purpose="notice",
            channel=room,
            thread_ts=thread_ts,
            text=text,
        )
        return queued is not None
