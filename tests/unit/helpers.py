"""Shared test doubles for the pure-module tests."""

from __future__ import annotations

from collections.abc import Callable

from nanoslack.inbound import Inbound

MessageFactory = Callable[..., Inbound]  # the conftest's human/bot fixtures


class Sink:
    """A downstream that records what reached it and can be told to fail."""

    def __init__(self) -> None:
        self.received: list[Inbound] = []
        self.fail = False

    async def __call__(self, msg: Inbound) -> None:
        if self.fail:
            raise RuntimeError("router down")
        self.received.append(msg)
