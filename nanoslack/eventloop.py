"""The event loop the fleet runs on.

uvloop (libuv's loop, the one uvicorn serves on) where it is installed: the fleet is one
thread that reads sockets, writes acks and wakes tasks, and libuv's loop does that work
for about a fifth less CPU than the standard library's (BENCHMARKS.md, "Speed, round
three"). ``NANOSLACK_EVENT_LOOP=asyncio`` keeps the standard library's; so does a
platform without uvloop (Windows). Nothing in ``nanoslack/`` depends on which loop it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
EventLoopName = Literal["uvloop", "asyncio"]


def loop_factory(name: EventLoopName = "uvloop") -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of that name; the standard library's when uvloop is not there."""
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            return asyncio.new_event_loop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], name: EventLoopName = "uvloop") -> T:
    """``asyncio.run`` on the named loop."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)
