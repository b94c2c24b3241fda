"""The bot-inbound guard (docs/architecture.md): humans pass, bots need an admission.

Bot-authored messages are the loop hazard of a fleet that hears itself, so the default
is closed: no policy, a policy error or an unexpected answer all drop the message.
Humans are never dropped or altered here; observers only watch them.

``decide`` is synchronous and returns the decision: the pipeline calls it inside the
batch transaction (where nothing may yield to the event loop) and then routes what
was admitted itself. A policy's ``on_accepted`` callback rides along on the decision
and runs once the message's processing has committed (``Admitted.accepted``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from nanoslack.frozen import quick_init
from nanoslack.inbound import Drop, Inbound
from nanoslack.logs import get_logger
from nanoslack.store.errors import store_unavailable

HumanObserver = Callable[[Inbound], None]
Callback = Callable[[], None]

NO_POLICY = "no bot-inbound policy installed"

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Admit:
    """A policy's yes: the sender id the bot message goes downstream as."""

    sender_id: str
    hop: int = 0
    hop_limit: int = 0
    # Runs after the message's processing committed; never for a message that failed.
    on_accepted: Callback | None = None


class BotInboundPolicy(Protocol):
    def __call__(self, msg: Inbound) -> Admit | Drop: ...


@quick_init
@dataclass(frozen=True, slots=True)
class Admitted:
    """The guard's yes: the message as it goes downstream (a bot's re-attributed,
    with its hop), and the policy's callback for after the commit."""

    msg: Inbound
    on_accepted: Callback | None = None

    def accepted(self) -> None:
        """Run the policy's callback; its failure is logged, never raised: the
        message is already processed and committed."""
        if self.on_accepted is None:
            return
        try:
            self.on_accepted()
        except Exception:
            log.warning(
                "admission callback failed",
                instance=self.msg.instance,
                channel=self.msg.channel,
                ts=self.msg.ts,
                exc_info=True,
            )


class BotInboundGuard:
    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._policy: BotInboundPolicy | None = None
        self._observers: list[HumanObserver] = []

    @property
    def policy(self) -> BotInboundPolicy | None:
        return self._policy

    def set_policy(self, policy: BotInboundPolicy | None) -> None:
        # One slot: a second installer silently overriding the first would change who
        # may talk to the agents, so make it visible.
        if self._policy is not None and policy is not self._policy:
            log.warning(
                "bot-inbound policy replaced",
                instance=self.instance,
                old=_name(self._policy),
                new=_name(policy),
            )
        self._policy = policy

    def add_observer(self, observer: HumanObserver) -> None:
        self._observers.append(observer)

    def decide(self, msg: Inbound) -> Admitted | Drop:
        if not msg.is_bot:
            self._notify_observers(msg)
            return Admitted(msg)
        answer = self._ask_policy(msg)
        if isinstance(answer, Drop):
            return answer
        return self._admit(msg, answer)

    def _notify_observers(self, msg: Inbound) -> None:
        for observer in self._observers:
            try:
                observer(msg)
            except Exception as exc:
                if store_unavailable(exc) is not None:
                    raise  # the reset is not skipped: the message waits for the store
                log.warning(
                    "human observer failed",
                    instance=self.instance,
                    channel=msg.channel,
                    ts=msg.ts,
                    observer=_name(observer),
                    exc_info=True,
                )

    def _ask_policy(self, msg: Inbound) -> Admit | Drop:
        policy = self._policy
        if policy is None:
            self._dropped(msg, NO_POLICY, level="debug")
            return Drop(NO_POLICY)
        try:
            answer = policy(msg)
        except Exception as exc:
            # A store that cannot answer now (a lost connection, a deadlock's victim, a
            # full disk) decides nothing: fail closed would drop the message for good.
            if store_unavailable(exc) is not None:
                raise
            reason = f"bot-inbound policy failed: {type(exc).__name__}"
            self._dropped(msg, reason, level="warning", exc_info=True)
            return Drop(reason)
        if isinstance(answer, Drop):
            self._dropped(msg, answer.reason, level="info")
            return answer
        if not isinstance(answer, Admit) or not answer.sender_id:
            reason = "bot-inbound policy gave no admission"
            self._dropped(msg, reason, level="warning")
            return Drop(reason)
        return answer

    def _admit(self, msg: Inbound, admit: Admit) -> Admitted:
        admitted = dataclasses.replace(
            msg, sender_id=admit.sender_id, hop=admit.hop, hop_limit=admit.hop_limit
        )
        log.info(
            "bot message admitted",
            instance=self.instance,
            channel=msg.channel,
            ts=msg.ts,
            bot_id=msg.bot_id,
            sender=admit.sender_id,
            hop=admit.hop,
            max=admit.hop_limit,
        )
        return Admitted(admitted, admit.on_accepted)

    def _dropped(self, msg: Inbound, reason: str, *, level: str, exc_info: bool = False) -> None:
        getattr(log, level)(
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
