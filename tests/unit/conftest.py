"""Fixtures shared by the unit tests: messages and a real store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nanoslack.inbound import Inbound, human_sender_id

MessageFactory = Callable[..., Inbound]


def _message(
    *,
    channel: str = "G0A",
    ts: str = "1700000000.000100",
    user: str | None = "U0HUMAN",
    bot_id: str | None = None,
    text: str = "hello",
    instance: str = "dana",
    **extra: Any,
) -> Inbound:
    return Inbound(
        instance=instance,
        team_id="T0TEAM",
        channel=channel,
        channel_type="mpim",
        ts=ts,
        thread_ts=None,
        user=user,
        bot_id=bot_id,
        text=text,
        mentions=(),
        event_type="message",
        sender_id="" if bot_id else human_sender_id(user or ""),
        **extra,
    )


@pytest.fixture
def human() -> MessageFactory:
    return _message


@pytest.fixture
def bot() -> MessageFactory:
    def make(bot_id: str = "B0ELI", user: str = "U0ELIBOT", **kw: Any) -> Inbound:
        return _message(bot_id=bot_id, user=user, **kw)

    return make
