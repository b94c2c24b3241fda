"""The one builder of ``Inbound`` messages for tests.

Every field can be given; the rest default to a human's plain message in an MPIM.
``sender_id`` follows the author unless given: ``slack:U…`` for a human and, for a bot,
``slack:bot:B…`` as the guard leaves an admitted bot message (pass ``sender_id=""``
for one the guard has not seen yet).
"""

from __future__ import annotations

import itertools
from typing import Any

from nanoslack.inbound import Inbound, bot_sender_id, human_sender_id

_ts = itertools.count(1)


def next_ts() -> str:
    """A fresh, increasing Slack ts."""
    return f"1700000000.{next(_ts):06d}"


def inbound(
    *,
    instance: str = "dana",
    team_id: str | None = "T0TEAM",
    channel: str = "C0ROOM",
    channel_type: str | None = None,
    ts: str | None = None,
    user: str | None = "U0HUMAN",
    bot_id: str | None = None,
    text: str = "hello",
    mention: str | None = None,
    sender_id: str | None = None,
    **fields: Any,
) -> Inbound:
    """``channel_type`` defaults to ``im`` for a ``D…`` channel, else ``mpim``; ``ts``
    to ``next_ts()``; ``mention`` (a user id) is put before the text and listed in
    ``mentions``. ``fields`` are any other ``Inbound`` fields (``thread_ts``, ``hop``…)."""
    if mention is not None:
        text = f"<@{mention}> {text}"
        fields.setdefault("mentions", (mention,))
    if channel_type is None:
        channel_type = "im" if channel.startswith("D") else "mpim"
    if sender_id is None:
        sender_id = bot_sender_id(bot_id) if bot_id else human_sender_id(user or "")
    fields.setdefault("thread_ts", None)
    fields.setdefault("mentions", ())
    fields.setdefault("event_type", "message")
    return Inbound(
        instance=instance,
        team_id=team_id,
        channel=channel,
        channel_type=channel_type,
        ts=ts or next_ts(),
        user=user,
        bot_id=bot_id,
        text=text,
        sender_id=sender_id,
        **fields,
    )
