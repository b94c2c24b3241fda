"""One process per instance across hosts (docs/operations.md): take the instance's lease
before connecting, renew it by heartbeat, wait as a standby while another process
holds it, and hand it back on a clean stop.

``NANOSLACK_LEASE_SECONDS`` (15) is how long a lease lives without a heartbeat,
``NANOSLACK_LEASE_HEARTBEAT`` (5) how often the holder renews it. A standby checks
every second (or every heartbeat, if shorter) and takes over once the lease
lapsed, or at once when the holder was a process of this host that no longer exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

from nanoslack.config.lease import LeaseTimings
from nanoslack.logs import get_logger
from nanoslack.store import Store, store_unavailable

log = get_logger("nanoslack.lease")

# How long a clean stop waits for an instance still stopping after its lease was lost.
LOST_STOP_WAIT_S = 20.0


def process_holder() -> str:
    """This process's name in lease rows: host, pid, and a nonce against pid reuse."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def dead_local_holder(holder: str) -> bool:
    """True when ``holder`` was a process of this host that has exited: a crash
    (kill -9) followed by a restart need not wait for the lease to lapse."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        timings: LeaseTimings,
        *,
        on_lost: Callable[[str], Awaitable[None]],
    ) -> None:
        self._store = store
        self.timings = timings
        self.holder = process_holder()
        self._on_lost = on_lost
        self._held: set[str] = set()
        self._waiting: dict[str, asyncio.Task[None]] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        # Instances being stopped after their lease was lost.
        self._losing: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> list[str]:
        return sorted(self._waiting)

    @property
    def held(self) -> tuple[str, ...]:
        """The instances whose lease this process holds now."""
        return tuple(sorted(self._held))

    def take(self, name: str, then: Callable[[], Awaitable[object]]) -> bool:
        """True when this process now holds ``name``; otherwise it waits as standby
        in the background and calls ``then`` once the lease is ours. A store that
        cannot answer now (a lease lost to an outage, retaken as it ends) makes a
        standby too: its poll takes the lease once the store is back."""
        try:
            if self._try(name):
                return True
        except Exception as exc:
            if store_unavailable(exc) is None:
                raise
            log.warning("lease check failed", instance=name, error=type(exc).__name__)
        if name not in self._waiting:
            self._waiting[name] = asyncio.create_task(self._standby(name, then), name=f"{name}-standby")
        return False

    def release(self, name: str) -> None:
        self._held.discard(name)
        try:
            self._store.leases.release(name, self.holder)
        except Exception as exc:  # the lease then lapses by itself
            log.warning("lease release failed", instance=name, error=type(exc).__name__)

    async def stand_down(self) -> None:
        """First step of a clean stop: no standby may start an instance any more.
        Leases stay held (and renewed) while the instances drain. An instance being
        stopped after a lost lease is let finish stopping first (it is no longer
        among the fleet's instances, so nobody else would)."""
        if self._losing:
            await asyncio.wait(list(self._losing), timeout=LOST_STOP_WAIT_S)
        tasks = [*self._waiting.values(), *self._losing]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._waiting.clear()

    async def stop(self) -> None:
        """Last step of a clean stop, once the instances stopped: leases go back at
        once, so a standby elsewhere takes over without waiting for them to lapse."""
        await self.stand_down()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None
        for name in sorted(self._held):
            self.release(name)

    def _try(self, name: str) -> bool:
        current = self._store.leases.get(name)
        stale = current.holder if current and dead_local_holder(current.holder) else None
        row = self._store.leases.take(name, self.holder, self.timings.ttl, stale=stale)
        if row.holder != self.holder:
            return False
        if name not in self._held:
            self._store.hops.forget(name)
        self._held.add(name)
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.create_task(self._heartbeat(), name="lease-heartbeat")
        return True

    async def _standby(self, name: str, then: Callable[[], Awaitable[object]]) -> None:
        try:
            row = self._store.leases.get(name)
        except Exception as exc:
            if store_unavailable(exc) is None:
                raise
            row = None
        previous = row.holder if row else None
        log.info("instance standby: lease held", instance=name, holder=previous)
        try:
            while not await self._poll(name):
                pass
        finally:
            self._waiting.pop(name, None)
        log.info("instance lease taken over", instance=name, previous=previous)
        await then()

    async def _poll(self, name: str) -> bool:
        await asyncio.sleep(self.timings.poll)
        try:
            return self._try(name)
        except Exception as exc:  # the database may be back on the next poll
            log.warning("lease check failed", instance=name, error=type(exc).__name__)
            return False

    async def _heartbeat(self) -> None:
        """Renew every held lease each heartbeat. A renewal the store cannot take (an
        outage) is tried again every poll, so a store back within the lease time
        renews it before it lapses and nothing stops. Unrenewed for a whole lease,
        the instance is handled as lost: a standby elsewhere may run it by now. It is
        stopped here (in a task of its own: stopping takes seconds, and the other
        leases must be renewed meanwhile) and waits as a standby, which takes the
        lease back once the store answers, if nobody else did."""
        last_ok: dict[str, float] = {}
        failing = False
        while True:
            await asyncio.sleep(self.timings.poll if failing else self.timings.heartbeat)
            failing = False
            for name in sorted(self._held):
                last_ok.setdefault(name, time.monotonic())
                ok = self._renew(name)
                if ok:
                    last_ok[name] = time.monotonic()
                # Unrenewed past the lease time: a standby may already run it.
                elif ok is False or time.monotonic() - last_ok[name] > self.timings.ttl:
                    self._held.discard(name)
                    last_ok.pop(name, None)
                    log.error("instance lease lost", instance=name, holder=self.holder)
                    self._losing.add(asyncio.create_task(self._lost(name), name=f"{name}-lease-lost"))
                else:
                    failing = True

    async def _lost(self, name: str) -> None:
        try:
            await self._on_lost(name)
        except Exception as exc:  # the heartbeat, and every other lease, must go on
            log.error("lease loss handling failed", instance=name, error=f"{type(exc).__name__}: {exc}")
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._losing.discard(task)

    def _renew(self, name: str) -> bool | None:
        try:
            return self._store.leases.renew(name, self.holder, self.timings.ttl)
        except Exception as exc:
            log.warning("lease renewal failed", instance=name, error=type(exc).__name__)
            return None
