"""Shared names for the pure-module tests."""

from __future__ import annotations

from collections.abc import Callable

from nanoslack.inbound import Inbound

MessageFactory = Callable[..., Inbound]  # the conftest's human/bot fixtures
