"""Which of a turn's replies carry Slack's 👍 / 👎, and how a reply posted whole carries
them (docs/agent-surface.md, "Feedback").

A turn's reply in a DM carries the buttons on the last of its posts there: a reply split
into parts (too long for one message, or several ``send_message`` posts) shows them once,
under its end. Rooms never show them (DESIGN: DM replies; the other bots read a room).

A streamed reply gets them from ``chat.stopStream`` (``blocks``, rendered below the
streamed text). A reply posted whole cannot send ``markdown_text`` with them (Slack takes
``markdown_text`` with neither ``text`` nor ``blocks``), so its Markdown goes in a
``markdown`` block followed by the buttons' ``context_actions`` block, with the same text
as ``text``: the fallback Slack shows in notifications and reads to screen readers.
"""

from __future__ import annotations

from typing import Any

from nanoslack.inbound import is_dm_channel
from nanoslack.replies import MAX_CHARS
from nanoslack.slack.blocks import Block, feedback_blocks
from nanoslack.store import OutboxRow, Store

# Slack: "the cumulative limit for all markdown blocks in a single payload is 12,000
# characters". A reply part is split at ``MAX_CHARS``, which is that: it fits in one.
MARKDOWN_BLOCK_MAX_CHARS = MAX_CHARS


def carries_feedback(store: Store, row: OutboxRow, channel: str) -> bool:
    """Whether ``row``, about to be sent to ``channel``, shows the 👍 / 👎 of its turn: a
    turn's reply post in a DM and the last of that turn's posts there."""
    if row.purpose != "reply" or row.kind != "post" or not row.turn_id or not is_dm_channel(channel):
        return False
    later = _next_part_key(row)
    following = store.outbox.get_by_key(later) if later is not None else None
    return following is None or following.status == "cancelled"


def reply_feedback(store: Store, row: OutboxRow, channel: str) -> list[Block] | None:
    """The buttons a streamed reply's ``chat.stopStream`` carries; None: none."""
    if row.turn_id is None or not carries_feedback(store, row, channel):
        return None
    return feedback_blocks(row.turn_id)


def whole_reply(text: str, feedback: list[Block] | None) -> dict[str, Any]:
    """The content of a reply posted or edited whole (``chat.postMessage``, ``chat.update``):
    its Markdown as ``markdown_text``, or, with the buttons, as a ``markdown`` block before
    them and ``text`` as the fallback."""
    if not feedback or len(text) > MARKDOWN_BLOCK_MAX_CHARS:
        return {"markdown_text": text}
    return {"text": text, "blocks": [{"type": "markdown", "text": text}, *feedback]}


def _next_part_key(row: OutboxRow) -> str | None:
    """The outbox key of the turn's next post to the same place: a turn's posts are keyed
    ``turn:<instance>:<turn>:<i>`` (``:<owner>`` after it for a routine's owners' DMs,
    ``nanoslack.turns.record``). None: a key of another shape (no later part is known)."""
    prefix = f"turn:{row.instance}:{row.turn_id}:"
    if not row.dedupe_key.startswith(prefix):
        return None
    index, sep, owner = row.dedupe_key.removeprefix(prefix).partition(":")
    if not index.isdigit():
        return None
    return f"{prefix}{int(index) + 1}{sep}{owner}"
