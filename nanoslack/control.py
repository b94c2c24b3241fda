"""Room control (DESIGN §5 "Room control"): what an owner's word and a bot's small talk mean.

Text rules first: the router and the turn dispatcher ask ``is_acknowledgement``
(a bot's "thanks!" wakes nobody, an agent's "Acknowledged." is silence). Then the
room-control stage (``RoomControl``), which the pipeline runs before the guard: an
owner's 🛑 or bare ``stop`` halts a room, ``resume`` resumes it, a halted room
drops bot messages; and the pause notice the A2A policy asks for at the hop limit.

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
from typing import Any, Literal

from nanoslack.inbound import Inbound, human_sender_id
from nanoslack.logs import get_logger
from nanoslack.store import HaltRow, Store

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
RESUME_ACTION_ID = "nanoslack_resume"
CLI_USER = "cli"
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

    def __init__(self, store: Store, *, instance: str, owners: Sequence[str]) -> None:
        self._store = store
        self.instance = instance
        self.owners = tuple(owners)
        self._owner_set = frozenset(self.owners)
        self._posted = False

    def take_posted(self) -> bool:
        """Whether notices were written since the last call (wake the poster after commit)."""
        posted, self._posted = self._posted, False
        return posted

    def is_owner_user(self, user: str | None) -> bool:
        return user is not None and user in self._owner_set

    def decide(self, msg: Inbound) -> Control | None:
        """None: not a room-control matter, the guard goes on with it."""
        if msg.event_type == REACTION_EVENT:
            return self._reaction(msg)
        if msg.is_bot:
            if self._store.rooms.is_halted(msg.channel):
                log.info(
                    "bot message dropped",
                    instance=self.instance,
                    channel=msg.channel,
                    ts=msg.ts,
                    reason=HALTED,
                )
                return Control("dropped", HALTED)
            return None
        if msg.is_dm or not self.is_owner_user(msg.user):
            return None
        command = command_of(msg.text)
        if command == "halt":
            return self.halt(msg.channel, by_user=str(msg.user))
        if command == "resume" and self.resume(msg.channel, by_user=str(msg.user)):
            return Control("processed", RESUMED, "resumed")
        return None  # "resume" in a running room is just a word

    def _reaction(self, msg: Inbound) -> Control:
        if (
            msg.reaction in HALT_REACTIONS
            and self.is_owner_user(msg.user)
            and not msg.channel.startswith("D")  # a DM is not a room
        ):
            return self.halt(msg.channel, by_user=str(msg.user))
        return Control("dropped", "reaction ignored")

    def halt(self, room: str, *, by_user: str) -> Control:
        """Halt the room; only the instance whose halt landed announces it."""
        who = _who(by_user)
        if not self._store.rooms.halt(room, by=_by(by_user), instance=self.instance):
            return Control("processed", "room already halted", "halted")
        stamp = _stamp(self._store.rooms.get(room))
        self._post(f"halt:{room}:{stamp}", channel=room, text=HALT_TEXT.format(who=who))
        for owner in self.owners:
            text = HALT_DM_TEXT.format(who=who, room=f"<#{room}>")
            self._post(
                f"halt:{room}:{stamp}:{owner}", dm_user=owner, text=text, blocks=_resume_blocks(room, text)
            )
        log.info(HALTED, instance=self.instance, room=room, by=by_user)
        return Control("processed", HALTED, "halted")

    def resume(self, room: str, *, by_user: str) -> bool:
        """False when the room was not halted (a second click, a stale button)."""
        halt = self._store.rooms.get(room)
        if not self._store.rooms.resume(room):
            return False
        text = RESUME_TEXT.format(who=_who(by_user))
        self._post(f"resume:{room}:{time.time():.6f}", channel=room, text=text)
        for owner in self.owners:
            self._retire_button(f"halt:{room}:{_stamp(halt)}:{owner}", text)
        log.info(RESUMED, instance=self.instance, room=room, by=by_user)
        return True

    def _retire_button(self, key: str, text: str) -> None:
        """Replace an owner's Resume button with who resumed (withdraw it if unsent)."""
        sent = self._store.outbox.get_by_key(key)
        if sent is not None and self._store.outbox.update_post(
            key,
            instance=sent.instance,
            dedupe_key=f"{key}:resumed",
            text=f"{sent.text} {text}",
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": f"{sent.text}\n{text}"}}],
        ):
            self._posted = True

    def hop_limit_reached(self, msg: Inbound, max_hops: int) -> None:
        """One pause notice per pause: the epoch is the last human message this
        instance saw in the room, so every instance that hits the limit before the
        next human message claims the same row, and only the first one posts."""
        epoch = self._store.rooms.last_human_ts(self.instance, msg.channel)
        if not self._store.rooms.claim_notice(msg.channel, "pause", epoch, instance=self.instance):
            return
        self._post(
            f"pause:{msg.channel}:{epoch}",
            channel=msg.channel,
            thread_ts=msg.thread_ts or msg.ts,
            text=PAUSE_TEXT.format(n=max_hops),
        )
        log.info("pause notice", instance=self.instance, room=msg.channel, max=max_hops, epoch=epoch)

    def _post(
        self,
        key: str,
        *,
        text: str,
        channel: str | None = None,
        dm_user: str | None = None,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
    ) -> None:
        self._store.outbox.enqueue(
            instance=self.instance,
            dedupe_key=key,
            channel=channel,
            dm_user=dm_user,
            thread_ts=thread_ts,
            text=text,
            blocks=blocks,
        )
        self._posted = True


def _stamp(halt: HaltRow | None) -> str:
    """Which halt of the room: keys its notice and DMs, so the resume finds them."""
    return f"{halt.halted_at:.6f}" if halt else "0"


def _by(user: str) -> str:
    return user if user == CLI_USER else human_sender_id(user)


def _who(user: str) -> str:
    return "the operator" if user == CLI_USER else f"<@{user}>"


def _resume_blocks(room: str, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "block_id": f"nanoslack_resume_{room}",
            "elements": [
                {
                    "type": "button",
                    "action_id": RESUME_ACTION_ID,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Resume"},
                    "value": room,
                }
            ],
        },
    ]
