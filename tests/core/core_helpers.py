"""Message builders and names shared by the core tests (importable, unlike conftest)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from nanoslack.asks import OwnerAsks
from nanoslack.gate import Gate
from nanoslack.inbound import Inbound, bot_sender_id, human_sender_id
from nanoslack.store import Store

INSTANCE = "dana"
BOT_USER = "U0DANABOT"  # dana's bot user: what a mention of dana names
OWNER = "U0OWNER"
ROOM = "C0ROOM"
DM = "D0DM"

_ts = itertools.count(1)


def next_ts() -> str:
    return f"1700000000.{next(_ts):06d}"


def message(
    *,
    channel: str = ROOM,
    user: str | None = "U0HUMAN",
    bot_id: str | None = None,
    text: str = "hello",
    mention: bool = False,
    thread_ts: str | None = None,
    ts: str | None = None,
    instance: str = INSTANCE,
    channel_type: str | None = None,
    bot_name: str | None = None,
) -> Inbound:
    if mention:
        text = f"<@{BOT_USER}> {text}"
    if channel_type is None:
        channel_type = "im" if channel.startswith("D") else "mpim"
    return Inbound(
        instance=instance,
        team_id="T0TEAM",
        channel=channel,
        channel_type=channel_type,
        ts=ts or next_ts(),
        thread_ts=thread_ts,
        user=user,
        bot_id=bot_id,
        text=text,
        mentions=(BOT_USER,) if mention else (),
        event_type="message",
        sender_id=bot_sender_id(bot_id) if bot_id else human_sender_id(user or ""),
        bot_name=bot_name,
    )


def bot_message(bot_id: str = "B0ELI", **kw: Any) -> Inbound:
    return message(bot_id=bot_id, user=kw.pop("user", "U0ELIBOT"), **kw)


def make_gate(store: Store, owners: Sequence[str] = (OWNER,)) -> Gate:
    """The gate as an instance's core builds it: asking ``owners`` through its asks."""
    return Gate(store, OwnerAsks(store, instance=INSTANCE, owners=owners))
