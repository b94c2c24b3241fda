"""The fleet: every configured instance in one asyncio process (``nanoslack run``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import structlog
from slack_sdk.errors import SlackApiError

from nanoslack.config import Settings
from nanoslack.inbound import Inbound
from nanoslack.pipeline import Outcome
from nanoslack.slack.instance import InstanceRuntime, Shared, SocketOptions
from nanoslack.slack.lease import LeaseKeeper, LeaseTimings
from nanoslack.store import Store

log = structlog.get_logger("nanoslack.fleet")


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
        self.leases = LeaseKeeper(self.store, LeaseTimings.from_env(settings.env), on_lost=self._lease_lost)

    async def start(self) -> list[str]:
        """Connect every instance that can run; the others are logged and skipped."""
        _disable_bolt_env_magic()
        runtimes = [InstanceRuntime(inst, self._shared) for inst in self.settings.instances]
        started = await asyncio.gather(*(self._start_one(rt) for rt in runtimes))
        names = [rt.name for rt, ok in zip(runtimes, started, strict=True) if ok]
        log.info(
            "fleet started",
            instances=[n for n in names if n in self.instances],
            standby=self.leases.waiting,
            skipped=[n for n, _ in self.settings.skipped],
        )
        return names

    async def _start_one(self, rt: InstanceRuntime) -> bool:
        # DESIGN §10: one process per instance; a standby runs _start_one again on takeover.
        if not self.leases.take(rt.name, then=lambda: self._start_one(rt)):
            return True
        if await self._connect(rt):
            return True
        self.leases.release(rt.name)
        return False

    async def _lease_lost(self, name: str) -> None:
        """Another process took the instance over: stop it here and stand by."""
        rt = self.instances.pop(name, None)
        if rt is not None:
            await rt.stop()
        inst = next(i for i in self.settings.instances if i.name == name)
        await self._start_one(InstanceRuntime(inst, self._shared))

    async def _connect(self, rt: InstanceRuntime) -> bool:
        try:
            ident = await rt.resolve_identity()
        except SlackApiError as exc:
            log.error("instance skipped: auth.test failed", instance=rt.name, error=exc.response.get("error"))
            return False
        except Exception as exc:
            log.error("instance skipped: auth.test failed", instance=rt.name, error=type(exc).__name__)
            return False
        rt.build()
        try:
            await rt.start()
        except Exception as exc:
            log.error("instance skipped: socket connect failed", instance=rt.name, error=type(exc).__name__)
            await rt.stop()
            return False
        self.instances[rt.name] = rt
        log.info("instance ready", instance=rt.name, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id)
        return True

    async def stop(self) -> None:
        await self.leases.stand_down()
        await asyncio.gather(*(rt.stop() for rt in self.instances.values()), return_exceptions=True)
        self.instances.clear()
        await self.leases.stop()
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
