"""Room control (DESIGN §5 "Room control"): what an owner's word and a bot's small talk mean.

Pure text rules, no store: the router and the turn dispatcher ask
``is_acknowledgement`` (a bot's "thanks!" wakes nobody, an agent's "Acknowledged."
is silence), the room-control stage asks ``command_of`` (an owner's ``stop`` halts
a room, ``resume`` resumes it).

Acknowledgements (case, punctuation, emoji shortcodes, emoji and mentions ignored;
a message made only of these phrases, e.g. "Ok, thanks!"):
thanks, thank you, thx, ty, ok, okay, got it, acknowledged, noted, 👍 / ``:+1:``,
and the silence markers agents print instead of saying nothing: ``*(silent)*``,
``(silent)``, ``NO_REPLY``, ``[silence]``.
"""

from __future__ import annotations

import re
from typing import Literal

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
