"""Helpers shared by the benches: the emulator in a subprocess, bare bolt apps, /proc figures.

Importing it also puts the repository on ``sys.path``; the benches start ``nanoslack run``
with ``nanoslack.fleetproc.FleetProcess``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))  # after bench/ itself, so _common and fleet_bench come first

from nanoslack.testing.ports import serve  # noqa: E402  # after the sys.path line above

PROXY_KEYS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


def drop_proxies() -> None:
    """Loopback traffic must never go through a proxy (slack-sdk ignores NO_PROXY)."""
    for k in list(os.environ):
        if "proxy" in k.lower():
            del os.environ[k]


def proc_cpu(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int, key: str = "VmRSS") -> float:
    """Resident set size (or ``VmHWM``, its peak) of a process in MB, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(key)


def bench_workspace(n_apps: int, n_rooms: int = 1) -> dict[str, Any]:
    """A human ``alice``, apps ``app0``… and ``n_rooms`` MPIMs holding all of them."""
    members = ["alice"] + [f"app{i}" for i in range(n_apps)]
    return {
        "team": {"id": "T0BENCH", "name": "bench"},
        "users": [{"name": "alice"}],
        "apps": [{"name": f"app{i}"} for i in range(n_apps)],
        "conversations": [{"kind": "mpim", "members": members} for _ in range(n_rooms)],
    }


def start_emulator(
    n_apps: int, *, spec: dict[str, Any] | None = None, ack_timeout: float = 60.0
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """The emulator in a subprocess (its own core); answers its ``--json`` info line."""
    spec = spec or bench_workspace(n_apps)
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115
    json.dump(spec, f)
    f.close()
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanoslack.emulator",
            "--workspace",
            f.name,
            "--json",
            "--ack-timeout",
            str(ack_timeout),
            "--no-api-log",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    os.unlink(f.name)
    return proc, info


def stop_process(proc: subprocess.Popen[str], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


class BoltSocket(Protocol):
    """What the benches use of slack-bolt's ``AsyncSocketModeHandler``: bolt leaves these
    methods unannotated, so their calls are typed here (a handler is one by its shape)."""

    async def connect_async(self) -> None: ...

    async def close_async(self) -> None: ...


async def connect_bare_bolt_apps(
    info: dict[str, Any], events: tuple[str, ...] = ("message",)
) -> list[BoltSocket]:
    """One slack-bolt AsyncApp + AsyncSocketModeHandler per emulator app, with a no-op
    listener per event type (so bolt acks them)."""
    handlers: list[BoltSocket] = []
    for a in info["apps"]:
        bolt = AsyncApp(client=AsyncWebClient(token=a["bot_token"], base_url=info["api_url"]))
        for event in events:

            @bolt.event(event)
            async def noop() -> None:
                return None

        h: BoltSocket = AsyncSocketModeHandler(bolt, app_token=a["app_token"])
        await h.connect_async()
        handlers.append(h)
    return handlers


@contextlib.asynccontextmanager
async def bare_bolt_apps(
    info: dict[str, Any], events: tuple[str, ...] = ("message",)
) -> AsyncIterator[list[BoltSocket]]:
    """``connect_bare_bolt_apps`` for the length of a ``with``: closed at its end."""
    handlers: list[BoltSocket] = []
    try:
        handlers = await connect_bare_bolt_apps(info, events)
        yield handlers
    finally:
        for h in handlers:
            await h.close_async()


async def serve_model(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> tuple[web.AppRunner, str]:
    """A bench's model server: ``handle`` answers the OpenAI chat completions on a free port of
    127.0.0.1. Its runner (to clean up) and the base URL for ``OPENAI_BASE_URL``."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner, port = await serve(app, "127.0.0.1")
    return runner, f"http://127.0.0.1:{port}/v1"


async def wait_until(
    probe: Callable[[], Awaitable[Any]], *, within: float, interval: float = 0.05, what: str = "condition"
) -> Any:
    """Poll an async probe until it answers something truthy; TimeoutError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        r = await probe()
        if r:
            return r
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {within}s")
        await asyncio.sleep(interval)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (``q`` in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]
