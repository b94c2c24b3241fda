"""The bot-inbound guard (DESIGN §3 step 5): humans pass, bots need an admission.

Bot-authored messages are the loop hazard of a fleet that hears itself, so the default
is closed: no policy, a policy error or an unexpected answer all drop the message.
Humans are never dropped or altered here; observers only watch them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from structlog.stdlib import BoundLogger

from nanoslack.inbound import Drop, Inbound
from nanoslack.logs import get_logger

Downstream = Callable[[Inbound], Awaitable[None]]
HumanObserver = Callable[[Inbound], Awaitable[None] | None]
Callback = Callable[[], Awaitable[None]]

NO_POLICY = "no bot-inbound policy installed"


@dataclass(frozen=True)
class Admit:
    sender_id: str
    hop: int = 0
    hop_limit: int = 0
    # Runs after downstream succeeded (commit); on_rejected after it failed (release).
    on_accepted: Callback | None = None
    on_rejected: Callback | None = None


class BotInboundPolicy(Protocol):
    async def __call__(self, msg: Inbound) -> Admit | Drop: ...


@dataclass(frozen=True)
class Delivered:
    msg: Inbound  # what went downstream (re-attributed for bots)


class BotInboundGuard:
    def __init__(self, instance: str, log: BoundLogger | None = None) -> None:
        self.instance = instance
        self._log = log or get_logger("nanoslack.guard")
        self._policy: BotInboundPolicy | None = None
        self._observers: list[HumanObserver] = []

    @property
    def policy(self) -> BotInboundPolicy | None:
        return self._policy

    def set_policy(self, policy: BotInboundPolicy | None) -> None:
        # One slot: a second installer silently overriding the first would change who
        # may talk to the agents, so make it visible.
        if self._policy is not None and policy is not self._policy:
            self._log.warning(
                "bot-inbound policy replaced",
                instance=self.instance,
                old=_name(self._policy),
                new=_name(policy),
            )
        self._policy = policy

    def add_observer(self, observer: HumanObserver) -> None:
        self._observers.append(observer)

    async def handle(self, msg: Inbound, downstream: Downstream) -> Delivered | Drop:
        if not msg.is_bot:
            await self._notify_observers(msg)
            await downstream(msg)
            return Delivered(msg)
        decision = await self._decide(msg)
        if isinstance(decision, Drop):
            return decision
        return await self._deliver_admitted(msg, decision, downstream)

    async def _notify_observers(self, msg: Inbound) -> None:
        for observer in self._observers:
            try:
                result = observer(msg)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self._log.warning(
                    "human observer failed",
                    instance=self.instance,
                    channel=msg.channel,
                    ts=msg.ts,
                    observer=_name(observer),
                    exc_info=True,
                )

    async def _decide(self, msg: Inbound) -> Admit | Drop:
        policy = self._policy
        if policy is None:
            self._dropped(msg, NO_POLICY, level="debug")
            return Drop(NO_POLICY)
        try:
            decision = await policy(msg)
        except Exception as exc:
            reason = f"bot-inbound policy failed: {type(exc).__name__}"
            self._dropped(msg, reason, level="warning", exc_info=True)
            return Drop(reason)
        if isinstance(decision, Drop):
            self._dropped(msg, decision.reason, level="info")
            return decision
        if not isinstance(decision, Admit) or not decision.sender_id:
            reason = "bot-inbound policy gave no admission"
            self._dropped(msg, reason, level="warning")
            return Drop(reason)
        return decision

    async def _deliver_admitted(self, msg: Inbound, admit: Admit, downstream: Downstream) -> Delivered:
        admitted = dataclasses.replace(
            msg.with_sender(admit.sender_id), hop=admit.hop, hop_limit=admit.hop_limit
        )
        self._log.info(
            "bot message admitted",
            instance=self.instance,
            channel=msg.channel,
            ts=msg.ts,
            bot_id=msg.bot_id,
            sender=admit.sender_id,
            hop=admit.hop,
            max=admit.hop_limit,
        )
        try:
            await downstream(admitted)
        except BaseException:
            # Cancellation included: a message that never got through must not use up a hop.
            await self._run_callback(admit.on_rejected, "on_rejected", msg)
            raise
        await self._run_callback(admit.on_accepted, "on_accepted", msg)
        return Delivered(admitted)

    async def _run_callback(self, callback: Callback | None, which: str, msg: Inbound) -> None:
        if callback is None:
            return
        try:
            await callback()
        except Exception:
            self._log.warning(
                "admission callback failed",
                instance=self.instance,
                channel=msg.channel,
                ts=msg.ts,
                callback=which,
                exc_info=True,
            )

    def _dropped(self, msg: Inbound, reason: str, *, level: str, exc_info: bool = False) -> None:
        log = getattr(self._log, level)
        log(
            "bot message dropped",
            instance=self.instance,
            channel=msg.channel,
            ts=msg.ts,
            bot_id=msg.bot_id,
            reason=reason,
            exc_info=exc_info,
        )


def _name(obj: object) -> str:
    if obj is None:
        return "none"
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__
