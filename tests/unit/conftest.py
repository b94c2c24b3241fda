"""Fixtures shared by the unit tests: messages and a real store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nanoslack.inbound import Inbound
from tests.factories import inbound

MessageFactory = Callable[..., Inbound]


def _message(**kw: Any) -> Inbound:
    """``tests.factories.inbound`` in the MPIM G0A at one fixed ts; a bot message as
    Slack sends it, before the guard has given it a sender id."""
    kw.setdefault("channel", "G0A")
    kw.setdefault("channel_type", "mpim")
    kw.setdefault("ts", "1700000000.000100")
    if kw.get("bot_id"):
        kw.setdefault("sender_id", "")
    return inbound(**kw)


@pytest.fixture
def human() -> MessageFactory:
    return _message


@pytest.fixture
def bot() -> MessageFactory:
    def make(bot_id: str = "B0ELI", user: str = "U0ELIBOT", **kw: Any) -> Inbound:
        return _message(bot_id=bot_id, user=user, **kw)

    return make
