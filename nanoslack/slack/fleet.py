"""The fleet: every configured instance in one asyncio process (``nanoslack run``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

from slack_sdk.errors import SlackApiError

from nanoslack.config import InstanceSettings, Settings
from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.pipeline import Outcome
from nanoslack.slack.instance import InstanceRuntime, Shared, SocketOptions
from nanoslack.store import Store

log = get_logger(__name__)


class Fleet:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        socket: SocketOptions | None = None,
        on_pending: Callable[[Inbound], None] | None = None,
        on_outcome: Callable[[Inbound, Outcome], None] | None = None,
    ) -> None:
        self.settings = settings
        self._own_store = store is None
        self.store = store or Store.open(settings.db_url)
        a2a = settings.a2a_source()
        self._shared = Shared(
            store=self.store,
            api_url=settings.api_url,
            owners=settings.owners,
            hop_scope=settings.hop_scope,
            a2a_config=a2a.get,
            socket=socket or SocketOptions(),
            on_pending=on_pending,
            on_outcome=on_outcome,
        )
        self.instances: dict[str, InstanceRuntime] = {}
        self._stopping = asyncio.Event()

    async def start(self) -> list[str]:
        """Connect every instance that can run; the others are logged and skipped."""
        _disable_bolt_env_magic()
        started = await asyncio.gather(*(self._start_one(inst) for inst in self.settings.instances))
        names = [name for name in started if name is not None]
        log.info("fleet started", instances=names, skipped=[n for n, _ in self.settings.skipped])
        return names

    async def _start_one(self, settings: InstanceSettings) -> str | None:
        name = settings.name
        try:
            rt = await InstanceRuntime.connect(settings, self._shared)
        except SlackApiError as exc:
            log.error("instance skipped: auth.test failed", instance=name, error=exc.response.get("error"))
            return None
        except Exception as exc:
            log.error("instance skipped: auth.test failed", instance=name, error=type(exc).__name__)
            return None
        try:
            await rt.start()
        except Exception as exc:
            log.error("instance skipped: socket connect failed", instance=name, error=type(exc).__name__)
            await rt.stop()
            return None
        self.instances[name] = rt
        ident = rt.identity
        log.info("instance ready", instance=name, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id)
        return name

    async def stop(self) -> None:
        await asyncio.gather(*(rt.stop() for rt in self.instances.values()), return_exceptions=True)
        self.instances.clear()
        if self._own_store:
            self.store.close()
        log.info("fleet stopped")

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> int:
        """Run until SIGINT/SIGTERM; exit code 1 when no instance could start."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            names = await self.start()
            if not names:
                log.error("no instance could start", skipped=[n for n, _ in self.settings.skipped])
                return 1
            await self._stopping.wait()
            return 0
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await self.stop()


def _disable_bolt_env_magic() -> None:
    """bolt switches to OAuth when SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are in
    the environment; a Socket Mode fleet never wants that."""
    for key in ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET"):
        if os.environ.pop(key, None) is not None:
            log.warning("environment key ignored", key=key, reason="OAuth is not used by the fleet")
