"""``/metrics``, ``/healthz`` and ``/readyz`` on ``NANOSLACK_METRICS_ADDR`` (docs/operations.md).

Served by aiohttp on the fleet's own event loop, not by prometheus-client's server
thread: ``/healthz`` answering then proves the loop answers, ``/readyz`` asks each
socket whether it is connected (an async call of slack-sdk's) and the store whether it
answers on the connection the fleet uses, and the tallies are read on the loop that
writes them, with no lock. prometheus-client renders the text format.

- ``/healthz``: 200 ``{"ok": true}`` while the loop answers.
- ``/readyz``: 200 ``{"ready": true}`` when every instance this process holds is
  connected and the store answers; else 503 ``{"ready": false, "reasons": [...]}``.
- ``/metrics``: the Prometheus text format (``nanoslack.metrics``).

Requests from other sites are refused (``nanoslack.localhttp``).
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nanoslack.localhttp import LocalGuard
from nanoslack.logs import get_logger
from nanoslack.metrics import FleetMetrics, FleetState

log = get_logger(__name__)


class HealthSource(Protocol):
    async def health(self, *, probe_store: bool = True) -> tuple[FleetState, list[str]]:
        """The fleet as it is now, and why it is not ready (empty: ready)."""
        ...


class HealthServer:
    def __init__(self, source: HealthSource, metrics: FleetMetrics, host: str, port: int) -> None:
        self._source = source
        self._metrics = metrics
        self._host, self._port = host, port
        self._guard = LocalGuard(host)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        """Bind and serve; the URL (with the port chosen when ``port`` was 0)."""
        app = web.Application(middlewares=[self._guard.middleware])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_page)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        port = int(self._runner.addresses[0][1])
        self._guard.bind(port)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"http://{host}:{port}/"
        log.info("metrics serving", url=self.url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _readyz(self, _request: web.Request) -> web.Response:
        _, reasons = await self._source.health()
        if reasons:
            return web.json_response({"ready": False, "reasons": reasons}, status=503)
        return web.json_response({"ready": True})

    async def _metrics_page(self, _request: web.Request) -> web.Response:
        state, _ = await self._source.health(probe_store=False)
        self._metrics.state = state
        body = generate_latest(self._metrics.registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response
