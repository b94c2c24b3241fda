"""What every instance of a fleet shares (``Services``), and the turns' options.

Below the stages that take it (the turn scheduler and recorder) and the composition root
that fills it (``nanoslack.core.FleetCore``), so a stage takes the one value plus its own
few parts instead of a keyword for each shared thing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nanoslack.agents import TokenLedger
from nanoslack.budgets import DollarLedger
from nanoslack.config import A2AConfig, ToolSettings
from nanoslack.features import RoomFeature
from nanoslack.inbound import Identity
from nanoslack.metrics import FleetMetrics
from nanoslack.replies import MAX_CHARS
from nanoslack.store import Store
from nanoslack.tools.ask import AskRoute
from nanoslack.worker import FleetBacklog, Observers


@dataclass(frozen=True)
class TurnOptions:
    poll_interval: float = 1.0
    # The turn sources' clocks (docs/architecture.md): how often they look, and the time they
    # read (a test's simulated day runs hours in seconds).
    clock_tick: float = 0.5
    clock_time: Callable[[], float] = time.time


@dataclass(frozen=True)
class Services:
    """What every instance of a fleet shares, read once from the settings: the one
    argument the builders take (``nanoslack.core.build_instance``, ``build_turns``, the
    turn scheduler and recorder) instead of a keyword each."""

    store: Store
    teammates_dir: Path
    # Every running instance: name → bot user id (``@name`` → ``<@U…>`` in replies).
    siblings: Callable[[], Mapping[str, str]]
    # Fleet-wide cap on agent calls running at once (NANOSLACK_MAX_TURNS).
    limiter: asyncio.Semaphore
    owners: tuple[str, ...] = ()
    hop_scope: str = "identity"
    a2a_config: Callable[[], A2AConfig] = lambda: A2AConfig(frozenset(), 0)
    room_tokens: int | None = None
    room_usd: float | None = None
    turns: TurnOptions = field(default_factory=TurnOptions)
    observers: Observers = field(default_factory=Observers)
    tools: ToolSettings = field(default_factory=ToolSettings)
    metrics: FleetMetrics = field(default_factory=FleetMetrics)
    # The LLM back ends' token ledger, and each instance's daily cap (None: unlimited).
    ledger: TokenLedger | None = None
    daily_tokens: Callable[[str], int | None] = lambda _instance: None
    # The same in US dollars (docs/agents.md "Cost in dollars").
    dollars: DollarLedger | None = None
    daily_usd: Callable[[str], float | None] = lambda _instance: None
    # Wakes the turns of a sibling this process runs (a handoff to it committed).
    wake: Callable[[str], None] = lambda _instance: None
    # Runs an ``ask_agent`` in the asked sibling's turns (docs/agents.md "Asking a teammate");
    # None: the tool is not offered.
    ask: AskRoute | None = None
    # The fleet's merged settings view: what ``${VAR}`` in an MCP config reads.
    setting: Callable[[str], str | None] = lambda _key: None
    # How long one DM reply may be before it is split: a streamed one is one message of
    # up to Slack's stream limit (NANOSLACK_STREAM, docs/agent-surface.md).
    dm_reply_chars: int = MAX_CHARS
    backlog: FleetBacklog = field(default_factory=FleetBacklog)
    # A fleet instance this process runs, as its messages name it (``slack:bot:B…``): a
    # chain room's lead run here may ask for lasting notes (``tools.memory.Notes``).
    bot_sender: Callable[[str], str | None] = lambda _instance: None
    # NANOSLACK_TZ: the zone routines' cron schedules are read in (docs/routines.md).
    tz: dt.tzinfo = dt.UTC
    # Room features beyond the built-in ones, made for each instance: they join the end
    # of ``build_instance``'s list, so a new feature needs no edit there.
    extra_features: Callable[[Identity], Sequence[RoomFeature]] = lambda _identity: ()
