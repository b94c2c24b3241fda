"""The A2A room policy (docs/architecture.md): which bot messages an instance may hear.

Bots are admitted only in rooms listed in ``SLACK_A2A_ROOMS`` and only for a bounded
number of consecutive hops; a human message resets the count. The count lives in the
store (``HopLedger``) so a restart or a second process cannot reset a loop guard. The
hop is *reserved* inside the transaction that processes the message: concurrent
deliveries never over-admit, and a message whose processing fails rolls its hop back
with everything else it wrote (docs/architecture.md: a downstream failure consumes no hop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nanoslack.config import HOP_SCOPES, A2AConfig
from nanoslack.guard import Admit, BotInboundGuard
from nanoslack.inbound import Drop, Inbound, bot_sender_id
from nanoslack.logs import get_logger

ROOM_NOT_LISTED = "room not in SLACK_A2A_ROOMS"
HOP_LIMIT_REACHED = "hop limit reached"
HOP_LIMIT_LOG = "hop limit reached — dropping bot messages until a human speaks"

log = get_logger(__name__)


class HopLedger(Protocol):
    def reserve(
        self, *, room: str, instance: str, ts: str, bot_id: str, max_hops: int, scope: str
    ) -> int | None: ...

    def reset(self, *, room: str, instance: str | None) -> int: ...


class A2APolicy:
    def __init__(
        self,
        *,
        instance: str,
        config: Callable[[], A2AConfig],
        ledger: HopLedger,
        scope: str = "identity",
        on_limit: Callable[[Inbound, int], None] | None = None,
        team_id: str | None = None,
    ) -> None:
        if scope not in HOP_SCOPES:
            raise ValueError(f"hop scope must be one of {HOP_SCOPES}, got {scope!r}")
        self.instance = instance
        self.scope = scope
        self._config = config
        self._ledger = ledger
        # Runs in the transaction whose reservation failed (the room's pause notice).
        self._on_limit = on_limit
        self.team_id = team_id  # ours (auth.test): only our own people re-arm a room

    def __call__(self, msg: Inbound) -> Admit | Drop:
        config = self._config()
        if msg.channel not in config.rooms:
            return Drop(ROOM_NOT_LISTED)
        if not msg.bot_id:
            # The guard only asks about bot-authored messages; never admit without Slack's id.
            return Drop("bot message without bot_id")
        if msg.from_fleet:
            # The room's intro (open-a2a-room) and the fleet's notices are not turns in
            # a conversation: they take no hop, and the router keeps them as context.
            return Admit(sender_id=bot_sender_id(msg.bot_id))
        return self._reserve(msg, msg.bot_id, config.max_hops)

    def _reserve(self, msg: Inbound, bot_id: str, max_hops: int) -> Admit | Drop:
        room, instance, ts = msg.channel, self.instance, msg.ts
        hop = self._ledger.reserve(
            room=room, instance=instance, ts=ts, bot_id=bot_id, max_hops=max_hops, scope=self.scope
        )
        if hop is None:
            log.info(HOP_LIMIT_LOG, instance=instance, room=room, bot_id=bot_id, max=max_hops)
            if self._on_limit is not None:
                self._on_limit(msg, max_hops)
            return Drop(HOP_LIMIT_REACHED)
        return Admit(sender_id=bot_sender_id(bot_id), hop=hop, hop_limit=max_hops)

    def observe_human(self, msg: Inbound) -> None:
        """A human spoke in a listed room: the bots may go another round."""
        if msg.channel not in self._config().rooms:
            return
        if self.team_id and msg.team_id and msg.team_id != self.team_id:
            # A Slack Connect guest is a person, but not one of the people this
            # fleet answers to: their chatter must not re-arm a bot loop.
            log.debug("hop reset skipped: other team", instance=self.instance, room=msg.channel)
            return
        instance = self.instance if self.scope == "identity" else None
        cleared = self._ledger.reset(room=msg.channel, instance=instance)
        if cleared:
            log.debug("hop counts reset", instance=self.instance, room=msg.channel, cleared=cleared)


def install_a2a_policy(guard: BotInboundGuard, policy: A2APolicy) -> None:
    guard.set_policy(policy)
    guard.add_observer(policy.observe_human)
