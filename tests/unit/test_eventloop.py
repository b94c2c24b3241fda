"""The loop the fleet is served on (nanoslack/eventloop.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import uvloop

from nanoslack import eventloop


def test_the_fleet_runs_on_uvloop_unless_asyncio_is_asked_for() -> None:
    async def kind() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    assert issubclass(eventloop.run(kind()), uvloop.Loop)
    ran_on = eventloop.run(kind(), "asyncio")
    assert not issubclass(ran_on, uvloop.Loop) and issubclass(ran_on, asyncio.BaseEventLoop)


def test_without_uvloop_installed_the_fleet_runs_on_asyncio() -> None:
    # A platform without uvloop (Windows): the default setting must still start the fleet.
    code = (
        "import sys, asyncio; sys.modules['uvloop'] = None\n"
        "from nanoslack import eventloop\n"
        "async def kind(): return type(asyncio.get_running_loop()).__module__\n"
        "print(eventloop.run(kind()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith("asyncio")
