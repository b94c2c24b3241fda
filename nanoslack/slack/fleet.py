"""The fleet: every configured instance in one asyncio process (``nanoslack run``).

What the instances are made of is built by ``nanoslack.core`` (``FleetCore``); the fleet
takes each instance's lease, connects it to Slack (``SlackInstance``), serves its
health and metrics when ``NANOSLACK_METRICS_ADDR`` asks for them, and stops it.

A stop (SIGTERM, SIGINT): the sockets close, so no new envelope is read; the turns
under way have ``NANOSLACK_SHUTDOWN_GRACE`` seconds to finish, their posts are sent,
what is still running then is cancelled (it runs again at the next start), and only
then are the leases released, so no standby can take an instance over while one of
its turns still runs here. A second signal hurries every wait of the stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal

from nanoslack import heap
from nanoslack.agents import Agent
from nanoslack.config import InstanceSettings, Settings
from nanoslack.core import FleetCore, Observers, OnOutcome, OnPending
from nanoslack.health import HealthServer
from nanoslack.housekeeping import PruneSchedule, prune_forever
from nanoslack.logs import get_logger
from nanoslack.metrics import FleetMetrics, FleetState
from nanoslack.services import TurnOptions
from nanoslack.shutdown import Shutdown, cancel
from nanoslack.slack.adapter import SocketOptions
from nanoslack.slack.files import FileFetcher
from nanoslack.slack.instance import EdgeOptions, SlackInstance, view_of
from nanoslack.slack.lease import LeaseKeeper
from nanoslack.slack.retry import Backoff, Failure, classify
from nanoslack.store import Store
from nanoslack.store.retention import Retention
from nanoslack.turns.scheduler import TurnsClosed
from nanoslack.worker import FleetBacklog

log = get_logger(__name__)


def _failed(name: str, step: str, exc: Exception) -> Failure:
    failure = classify(exc)
    if not failure.passes:
        log.error(f"instance skipped: {step} failed", instance=name, error=failure.error)
    return failure


class Fleet:
    def __init__(
        self,
        settings: Settings,
        *,
        socket: SocketOptions | None = None,
        turns: TurnOptions | None = None,
        on_pending: OnPending | None = None,
        on_outcome: OnOutcome | None = None,
        prune: PruneSchedule | None = None,
    ) -> None:
        self.settings = settings
        self._prune = prune or PruneSchedule()
        self._prune_task: asyncio.Task[None] | None = None
        # Every instance on the wire, from the moment it is built until it stops (before
        # ``instances`` has it: it is woken and watched while it starts).
        self._edges: dict[str, SlackInstance] = {}
        # A commit that queued an outbox row wakes that instance's poster.
        self.store = Store.open(settings.db_url, on_queued=self._wake_poster)
        self.instances: dict[str, SlackInstance] = {}
        self.metrics = FleetMetrics()
        self.core = FleetCore(
            settings,
            self.store,
            siblings=self._siblings,
            turns=turns,
            observers=Observers(on_pending=on_pending, on_outcome=on_outcome),
            metrics=self.metrics,
            # The fleet's turns wait while a socket has envelopes read and not acked.
            backlog=FleetBacklog(sockets_busy=self._sockets_busy),
        )
        self._edge = EdgeOptions(
            api_url=settings.api_url,
            store=self.store,
            siblings=self._siblings,
            socket=socket or SocketOptions(),
            post_rate=settings.post_rate,
            working_reaction=settings.tools.working_reaction,
            metrics=self.metrics,
            files=FileFetcher(settings.files, settings.api_url),
        )
        self._stopping = asyncio.Event()
        self._shutdown: Shutdown | None = None
        self._started = False
        # Instances whose lease another process took while this one held it.
        self._lost: set[str] = set()
        self.leases = LeaseKeeper(self.store, settings.lease_timings(), on_lost=self._lease_lost)
        self.health_server: HealthServer | None = None
        # Instances whose connect failed for a reason of Slack's: the error, and the task
        # that tries again (docs/operations.md).
        self._waiting: dict[str, str] = {}
        self._retries: dict[str, asyncio.Task[None]] = {}

    async def _prune_files(self) -> int:
        """Downloads whose messages retention removed go with them (docs/agents.md "Files")."""
        fetcher = self._edge.files
        if fetcher is None:
            return 0
        return await asyncio.to_thread(fetcher.prune, self.store.message_files.file_ids())

    def _holds_lease(self, name: str) -> bool:
        return self.store.leases.holds(name, self.leases.holder)

    def _wake_poster(self, instance: str) -> None:
        rt = self._edges.get(instance)
        if rt is not None:
            rt.wake_poster()

    def _sockets_busy(self) -> bool:
        return any(rt.socket_busy() for rt in self._edges.values())

    def _siblings(self) -> dict[str, str]:
        return {name: rt.identity.bot_user_id for name, rt in self.instances.items()}

    async def start(self) -> list[str]:
        """Connect every instance that can run; the others are logged and skipped.
        With ``NANOSLACK_METRICS_ADDR``, serve the health endpoints first (``/readyz``
        says 503 while the instances connect); raises when that address is unusable."""
        await self._serve_health()
        self.store.checkpoints.start()
        a2a = self.core.a2a.get()  # read now: a malformed value is warned about at start
        self.core.check_rooms()
        agents = {inst.name: self.core.agent_for(inst.name) for inst in self.settings.instances}
        runnable = [(inst, agent) for inst in self.settings.instances if (agent := agents[inst.name])]
        started = await asyncio.gather(*(self._start_one(inst, agent) for inst, agent in runnable))
        names = [inst.name for (inst, _), ok in zip(runnable, started, strict=True) if ok]
        retention = Retention(self.store.db, days=self.settings.retention_days)
        self._prune_task = asyncio.create_task(
            prune_forever(retention, self._prune, after=self._prune_files), name="store-prune"
        )
        self._started = True
        log.info(
            "fleet started",
            instances=[n for n in names if n in self.instances],
            standby=self.leases.waiting,
            waiting_for_slack=sorted(self._waiting),
            skipped=[n for n, _ in self.settings.skipped] + [n for n, a in agents.items() if a is None],
            a2a_rooms=sorted(a2a.rooms),
            max_hops=a2a.max_hops,
            hop_scope=self.settings.hop_scope,
            agents={n: a.name for n, a in agents.items() if a is not None and n in names},
        )
        return names

    async def _start_one(self, settings: InstanceSettings, agent: Agent) -> bool:
        """True once the instance runs here, or waits as a standby for its lease."""
        # docs/operations.md: one process per instance; a standby runs _start_one again on takeover.
        if not self.leases.take(settings.name, then=lambda: self._start_one(settings, agent)):
            return True
        if await self._connect(settings, agent):
            self._lost.discard(settings.name)
            return True
        self.leases.release(settings.name)
        return False

    async def _lease_lost(self, name: str) -> None:
        """Another process took the instance over: stop it here and stand by."""
        self._lost.add(name)
        retry = self._retries.pop(name, None)
        if retry is not None:
            await cancel(retry)
        rt = self.instances.pop(name, None)
        if rt is not None:
            await rt.stop()
            self._edges.pop(name, None)
        if self._shutdown is not None:
            return  # stopping: no standby any more
        agent = rt.core.agent if rt is not None else self.core.agent_for(name)
        if agent is not None:
            await self._start_one(next(i for i in self.settings.instances if i.name == name), agent)

    async def _connect(self, settings: InstanceSettings, agent: Agent) -> bool:
        """True once the instance is connected, or waits for Slack to come back (a task
        tries again with backoff: docs/operations.md); False when it is skipped."""
        failure = await self._try_connect(settings, agent)
        if failure is None:
            return True
        if not failure.passes:
            return False
        name = settings.name
        self._waiting[name] = failure.error
        self._retries[name] = asyncio.create_task(
            self._keep_trying(settings, agent, failure), name=f"{name}-waiting-for-slack"
        )
        return True

    async def _keep_trying(self, settings: InstanceSettings, agent: Agent, failure: Failure) -> None:
        """Slack's own failures pass: try again, 1 s doubling to 60 s, for as long as the
        process runs; only a token error (or an error Slack will repeat) ends it."""
        name = settings.name
        backoff = Backoff(self._edge.socket.backoff_first, self._edge.socket.backoff_cap)
        try:
            while failure.passes:
                self._waiting[name] = failure.error
                delay = backoff.delay(failure.retry_after)
                log.warning(
                    "instance waiting for Slack",
                    instance=name,
                    error=failure.error,
                    next_try_in_s=round(delay, 1),
                )
                await asyncio.sleep(delay)
                next_failure = await self._try_connect(settings, agent)
                if next_failure is None:
                    return
                failure = next_failure
            self.leases.release(name)
        finally:
            self._waiting.pop(name, None)
            self._retries.pop(name, None)

    async def _try_connect(self, settings: InstanceSettings, agent: Agent) -> Failure | None:
        """One try: None once connected; else why not. A failure that does not pass is
        logged ``instance skipped: …`` here; one that passes is the caller's to retry."""
        name = settings.name
        fence = functools.partial(self._holds_lease, name)
        try:
            # Slack says who the instance is; the core is built from the edge's parts of
            # it; the instance joins the two (docs/architecture.md).
            intro = await SlackInstance.introduce(
                settings, self._edge, self.settings.surface, view=view_of(self.settings, name)
            )
        except Exception as exc:
            return _failed(name, "auth.test", exc)
        try:
            core = self.core.instance(intro.identity, agent, intro.parts(fence=fence))
            rt = SlackInstance(intro, self._edge, core)
        except Exception as exc:
            await intro.close()  # its post session: the instance never ran
            return _failed(name, "auth.test", exc)
        self._edges[name] = rt
        try:
            await rt.start()
        except Exception as exc:
            await rt.stop()
            self._edges.pop(name, None)
            return _failed(name, "socket connect", exc)
        self.instances[name] = rt
        ident = rt.identity
        log.info("instance ready", instance=name, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id)
        return None

    async def _serve_health(self) -> None:
        addr = self.settings.metrics_addr  # ConfigError when malformed: run checks it first
        if addr is None or self.health_server is not None:
            return
        server = HealthServer(self, self.metrics, *addr)
        await server.start()
        self.health_server = server

    async def health(self, *, probe_store: bool = True) -> tuple[FleetState, list[str]]:
        """For ``/metrics`` and ``/readyz``: every instance this process holds, its socket,
        the backlog, the leases; and why the fleet is not ready, if it is not (the store
        is asked only with ``probe_store``: ``/metrics`` does not need it)."""
        held = self.leases.held
        connected = {}
        for name in held:
            rt = self.instances.get(name)
            connected[name] = rt is not None and await rt.is_connected()
        state = FleetState(
            connected=connected,
            backlog={name: rt.core.inbox.backlog() for name, rt in self.instances.items()},
            leases=held,
        )
        waiting = dict(self._waiting)
        reasons = [
            f"{name}: waiting for Slack ({waiting[name]})" if name in waiting else f"{name}: not connected"
            for name, up in connected.items()
            if not up
        ]
        reasons += [f"{name}: lease lost to another process" for name in sorted(self._lost)]
        if not self._started:
            reasons.append("starting")
        if self._shutdown is not None:
            reasons.append("stopping")
        if probe_store:
            try:
                self.store.ping()
            except Exception as exc:
                reasons.append(f"store not answering: {type(exc).__name__}")
        return state, reasons

    async def stop(self) -> None:
        """A clean stop (see the module docstring); logs ``fleet stopped`` with how many
        turns finished in the grace and how many were left for the next start."""
        shutdown = self._begin_stop()
        if self._prune_task is not None:
            self._prune_task.cancel()
        for retry in list(self._retries.values()):
            await cancel(retry)
        await self.leases.stand_down()
        results = await asyncio.gather(
            *(rt.stop(shutdown) for rt in self.instances.values()), return_exceptions=True
        )
        closed = [r for r in results if isinstance(r, TurnsClosed)]
        self.instances.clear()
        self._edges.clear()
        await self.leases.stop()
        await self.core.close()
        if self._edge.files is not None:
            await self._edge.files.close()
        self.store.checkpoints.stop()
        if self.health_server is not None:
            await self.health_server.stop()
            self.health_server = None
        self.store.close()
        log.info(
            "fleet stopped",
            turns_finished=sum(c.finished for c in closed),
            turns_left=sum(c.left for c in closed),
            hurried=shutdown.hurry.is_set(),
        )

    def _begin_stop(self) -> Shutdown:
        if self._shutdown is None:
            self._shutdown = Shutdown(grace=self.settings.shutdown_grace)
            log.info("fleet stopping", grace_s=self.settings.shutdown_grace)
        return self._shutdown

    def request_stop(self) -> None:
        """The first signal stops the fleet; the next ones hurry the stop."""
        if self._stopping.is_set():
            shutdown = self._begin_stop()
            if not shutdown.hurry.is_set():
                shutdown.hurry.set()
                log.warning("fleet stopping now", reason="second signal: turns under way are cancelled")
            return
        self._stopping.set()

    async def run(self) -> int:
        """Run until SIGINT/SIGTERM; exit code 1 when no instance could start (or the
        metrics address cannot be served)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            try:
                await self._serve_health()
            except OSError as exc:
                log.error("metrics address unavailable", key="NANOSLACK_METRICS_ADDR", error=str(exc))
                return 1
            names = await self.start()
            if not names:
                log.error("no instance could start", skipped=[n for n, _ in self.settings.skipped])
                return 1
            heap.settle()  # what start-up made lives as long as the process (nanoslack/heap.py)
            await self._stopping.wait()
            return 0
        finally:
            # The handlers stay while the fleet stops: a second signal hurries the stop.
            await self.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
