"""The fleet: every configured instance in one asyncio process (``nanoslack run``).

What the instances are made of is built by ``nanoslack.core.FleetCore``; the fleet
takes each instance's lease, connects it to Slack (``SlackInstance``) and stops it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal

from slack_sdk.errors import SlackApiError

from nanoslack.agents import Agent
from nanoslack.config import InstanceSettings, Settings
from nanoslack.core import Directory, FleetCore, InstanceCore, Observers, OnOutcome, OnPending
from nanoslack.housekeeping import PruneSchedule, prune_forever
from nanoslack.inbound import Identity
from nanoslack.logs import get_logger
from nanoslack.slack.instance import EdgeOptions, SlackInstance
from nanoslack.slack.lease import LeaseKeeper, LeaseTimings
from nanoslack.slack.socket import SocketOptions, SocketThread
from nanoslack.store import Store
from nanoslack.store.retention import Retention
from nanoslack.turns import TurnOptions

log = get_logger(__name__)


class Fleet:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        socket: SocketOptions | None = None,
        turns: TurnOptions | None = None,
        on_pending: OnPending | None = None,
        on_outcome: OnOutcome | None = None,
        prune: PruneSchedule | None = None,
    ) -> None:
        self.settings = settings
        self._prune = prune or PruneSchedule()
        self._prune_task: asyncio.Task[None] | None = None
        self._own_store = store is None
        self.store = store or Store.open(settings.db_url)
        self.instances: dict[str, SlackInstance] = {}
        self.core = FleetCore(
            settings,
            self.store,
            siblings=self._siblings,
            turns=turns,
            observers=Observers(on_pending=on_pending, on_outcome=on_outcome),
        )
        socket = socket or SocketOptions()
        self._sockets = SocketThread() if socket.own_thread else None
        self._edge = EdgeOptions(
            api_url=settings.api_url,
            store=self.store,
            siblings=self._siblings,
            socket=socket,
            post_rate=settings.post_rate,
            sockets=self._sockets,
        )
        self._stopping = asyncio.Event()
        self.leases = LeaseKeeper(self.store, LeaseTimings.from_env(settings.env), on_lost=self._lease_lost)

    def _holds_lease(self, name: str) -> bool:
        return self.store.leases.holds(name, self.leases.holder)

    def _siblings(self) -> dict[str, str]:
        return {name: rt.identity.bot_user_id for name, rt in self.instances.items()}

    async def start(self) -> list[str]:
        """Connect every instance that can run; the others are logged and skipped."""
        _disable_bolt_env_magic()
        a2a = self.core.a2a.get()  # read now: a malformed value is warned about at start
        agents = {inst.name: self.core.agent_for(inst.name) for inst in self.settings.instances}
        runnable = [(inst, agent) for inst in self.settings.instances if (agent := agents[inst.name])]
        started = await asyncio.gather(*(self._start_one(inst, agent) for inst, agent in runnable))
        names = [inst.name for (inst, _), ok in zip(runnable, started, strict=True) if ok]
        retention = Retention(self.store.db, days=self.settings.retention_days)
        self._prune_task = asyncio.create_task(prune_forever(retention, self._prune), name="store-prune")
        log.info(
            "fleet started",
            instances=[n for n in names if n in self.instances],
            standby=self.leases.waiting,
            skipped=[n for n, _ in self.settings.skipped] + [n for n, a in agents.items() if a is None],
            a2a_rooms=sorted(a2a.rooms),
            max_hops=a2a.max_hops,
            hop_scope=self.settings.hop_scope,
            agents={n: a.name for n, a in agents.items() if a is not None and n in names},
        )
        return names

    async def _start_one(self, settings: InstanceSettings, agent: Agent) -> bool:
        """True once the instance runs here, or waits as a standby for its lease."""
        # DESIGN §10: one process per instance; a standby runs _start_one again on takeover.
        if not self.leases.take(settings.name, then=lambda: self._start_one(settings, agent)):
            return True
        if await self._connect(settings, agent):
            return True
        self.leases.release(settings.name)
        return False

    async def _lease_lost(self, name: str) -> None:
        """Another process took the instance over: stop it here and stand by."""
        rt = self.instances.pop(name, None)
        if rt is not None:
            await rt.stop()
        agent = rt.core.agent if rt is not None else self.core.agent_for(name)
        if agent is not None:
            await self._start_one(next(i for i in self.settings.instances if i.name == name), agent)

    async def _connect(self, settings: InstanceSettings, agent: Agent) -> bool:
        name = settings.name
        fence = functools.partial(self._holds_lease, name)

        def build_core(identity: Identity, directory: Directory) -> InstanceCore:
            return self.core.instance(identity, agent, directory=directory, fence=fence)

        try:
            rt = await SlackInstance.connect(settings, self._edge, build_core)
        except SlackApiError as exc:
            log.error("instance skipped: auth.test failed", instance=name, error=exc.response.get("error"))
            return False
        except Exception as exc:
            log.error("instance skipped: auth.test failed", instance=name, error=type(exc).__name__)
            return False
        try:
            await rt.start()
        except Exception as exc:
            log.error("instance skipped: socket connect failed", instance=name, error=type(exc).__name__)
            await rt.stop()
            return False
        self.instances[name] = rt
        ident = rt.identity
        log.info("instance ready", instance=name, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id)
        return True

    async def stop(self) -> None:
        if self._prune_task is not None:
            self._prune_task.cancel()
        await self.leases.stand_down()
        await asyncio.gather(*(rt.stop() for rt in self.instances.values()), return_exceptions=True)
        self.instances.clear()
        if self._sockets is not None:
            await asyncio.to_thread(self._sockets.stop)
        await self.leases.stop()
        await self.core.close()
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
