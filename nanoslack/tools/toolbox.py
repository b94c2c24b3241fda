"""One turn's tools and budget (``agents.Tools``): the host tools, the fleet's tool families
(notes, team rooms, routines), the teammate's MCP tools, all of the one shape
(``agents.tool.Tool``); the token budgets checked before every model call, every step recorded.

Built per turn by the instance's ``Toolboxes`` (``nanoslack.core`` wires them). What the
host tools mean to do is left in ``effects`` for the turn's recorder; MCP tools run at
once (they are the server's business, and may run again if the turn is re-run after a
crash). A tool marked ``"approval": "owner"`` waits for an owner's Allow first. A call whose
arguments do not fit the tool's model is refused with the reason, and recorded like any other.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nanoslack import tracing
from nanoslack.agents import BudgetExhausted, ModelCall, TokenLedger, ToolResult, Turn
from nanoslack.agents.redact import scrub
from nanoslack.agents.tool import Tool, dumped
from nanoslack.budgets import DollarLedger, RoomBudget, usd
from nanoslack.config import ToolSettings
from nanoslack.logs import get_logger, redact_text
from nanoslack.store import MessageRow, Store
from nanoslack.tools.ask import AskContext, AskedBy, AskRoute, AskTools
from nanoslack.tools.host import HostContext, HostTools, TurnEffects, react_target

log = get_logger(__name__)

# A tool result longer than this reaches the model cut, with a note (docs/agents.md).
MAX_RESULT_CHARS = 20_000


class McpTools(Protocol):
    """A teammate's MCP servers, as the toolbox uses them (``nanoslack.tools.mcp``): the
    tools of the servers connected now (``approval`` set on those an owner must allow)."""

    def tools(self) -> Sequence[Tool[Any]]: ...


# Builds one family of a turn's tools (notes, team rooms, routines): (turn id, turn, the
# messages it answers, its effects) -> its tools, what they mean to do left in the effects.
ToolFamily = Callable[[int, Turn, Sequence[MessageRow], TurnEffects], Sequence[Tool[Any]]]


class ToolApprover(Protocol):
    """Asks the owners whether a tool call may run (``nanoslack.asks``, kind ``tool``)."""

    async def approve(self, *, turn_id: int, tool: str, arguments: Mapping[str, Any]) -> ToolResult | None:
        """None when allowed; otherwise the refusal to give the model (denied, no answer)."""
        ...


@dataclass(frozen=True)
class TurnBudget:
    """The budgets one turn's model calls spend: the instance's day and the room's day."""

    instance: str
    channel: str
    turn_id: int
    store: Store
    ledger: TokenLedger | None = None
    daily_tokens: int | None = None  # NANOSLACK_DAILY_TOKENS[_SUF]
    room: RoomBudget | None = None  # NANOSLACK_ROOM_TOKENS and NANOSLACK_ROOM_USD
    # A turn no message woke (a routine's run): the tokens its own daily cap has left
    # today (None: no cap).
    own_left: Callable[[], int | None] | None = None
    dollars: DollarLedger | None = None
    daily_usd: float | None = None  # NANOSLACK_DAILY_USD[_SUF]

    def check(self) -> None:
        if self.daily_tokens is not None and self.ledger is not None:
            used = self.ledger.used_today(self.instance)
            if used >= self.daily_tokens:
                log.warning("budget exhausted", instance=self.instance, used=used, cap=self.daily_tokens)
                raise BudgetExhausted(
                    f"daily token budget spent: {used} of {self.daily_tokens} tokens used today",
                    scope="instance",
                )
        if self.daily_usd is not None and self.dollars is not None:
            spent = self.dollars.usd_today(self.instance)
            if spent >= self.daily_usd:
                log.warning(
                    "budget exhausted", instance=self.instance, used_usd=spent, cap_usd=self.daily_usd
                )
                raise BudgetExhausted(
                    f"daily dollar budget spent: {usd(spent)} of {usd(self.daily_usd)} used today",
                    scope="instance",
                    unit="usd",
                )
        unit = self.room.spent(self.channel) if self.room is not None else None
        if unit is not None:
            raise BudgetExhausted(
                f"this room's {unit.budget} for today is spent", scope="room", unit=unit.name
            )
        left = self.own_left() if self.own_left is not None else None
        if left is not None and left <= 0:
            raise BudgetExhausted("this routine's daily_tokens for today are spent", scope="routine")

    def spend(self, tokens: int) -> None:
        if tokens <= 0:
            return
        if self.ledger is not None:
            self.ledger.add(self.instance, tokens)
        self.store.turns.add_tokens(self.turn_id, tokens)


class TurnToolbox:
    """One turn's tools: the host's first, then the fleet's families, then the MCP
    servers' (a name already taken is not offered twice). ``call`` is the one way any
    back end's call reaches a tool: its arguments checked against the tool's model, an
    owner asked first when the tool wants it, the result cut, the step recorded."""

    def __init__(
        self,
        *,
        turn_id: int,
        instance: str,
        store: Store,
        host: HostTools,
        budget: TurnBudget,
        max_steps: int,
        mcp: McpTools | None = None,
        approver: ToolApprover | None = None,
        families: Sequence[Sequence[Tool[Any]]] = (),
        billed: Callable[[int, int], int] = lambda tokens, _cached: tokens,
    ) -> None:
        self.turn_id = turn_id
        self._billed = billed
        self.instance = instance
        self._store = store
        self._host = host
        self._budget = budget
        self._max_steps = max_steps
        self._mcp = mcp
        self._approver = approver
        self._fleet = _unique([*host.tools(), *(tool for family in families for tool in family)])
        self._step = 0
        self.tokens = 0

    @property
    def effects(self) -> TurnEffects:
        return self._host.effects

    @property
    def max_steps(self) -> int:
        return self._max_steps

    def tools(self) -> Sequence[Tool[Any]]:
        """What the agent is offered now (an MCP server's tools while it is connected)."""
        offered = [tool for tool in self._fleet.values() if tool.offered]
        if self._mcp is not None:
            offered += [tool for tool in self._mcp.tools() if tool.name not in self._fleet]
        return offered

    def _find(self, name: str) -> Tool[Any] | None:
        found = self._fleet.get(name)
        if found is None and self._mcp is not None:
            found = next((tool for tool in self._mcp.tools() if tool.name == name), None)
        return found

    async def call(self, name: str, arguments: object) -> ToolResult:
        start = time.monotonic()
        tool = self._find(name)
        with tracing.tool_call(name) as span:
            try:
                result = await self._call(tool, name, arguments)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a tool's failure is the model's to hear about, not the turn's end
                result = ToolResult(f"the tool failed: {type(exc).__name__}", is_error=True)
            if result.is_error:
                span.set({"error.type": "tool_error"})
        result = _cut(result)
        self._record(
            "tool",
            name,
            arguments=_arguments(dumped(arguments)),
            result_size=len(result.text),
            ms=(time.monotonic() - start) * 1000,
            error=result.text if result.is_error else None,
        )
        return result

    async def _call(self, tool: Tool[Any] | None, name: str, arguments: object) -> ToolResult:
        if tool is None:
            return ToolResult(f"unknown tool {name!r}", is_error=True)
        fitted = tool.fit(arguments)
        if isinstance(fitted, str):
            return ToolResult(fitted, is_error=True)
        if tool.approval and self._approver is not None:
            refusal = await self._approver.approve(turn_id=self.turn_id, tool=name, arguments=dumped(fitted))
            if refusal is not None:
                return refusal
        return await tool.run(fitted)

    def before_model_call(self) -> None:
        self._budget.check()

    def after_model_call(self, call: ModelCall) -> None:
        tokens = max(0, int(call.tokens))
        cached = min(max(0, int(call.cached_tokens)), tokens)
        self.tokens += tokens
        self.effects.tokens += tokens
        self.effects.cached_tokens += cached
        self.effects.cost_usd += call.cost_usd or 0.0
        # Cache reads count toward the token budgets at NANOSLACK_CACHED_TOKEN_WEIGHT; the
        # dollar budgets read the steps' prices (the table prices cache reads itself).
        self._budget.spend(self._billed(tokens, cached))
        self._record(
            "model",
            call.model,
            tokens=tokens,
            cached_tokens=cached,
            cost_usd=call.cost_usd,
            ms=call.ms,
            error=call.error,
        )

    def _record(self, kind: str, name: str, **fields: Any) -> None:
        self._step += 1
        error = fields.pop("error", None)
        try:
            self._store.steps.add(
                self.turn_id,
                self._step,
                kind=kind,
                name=name,
                error=scrub(redact_text(error)) if error else None,
                **fields,
            )
        except Exception as exc:  # a step not recorded is a lost log line, not a lost turn
            log.warning(
                "turn step not recorded", instance=self.instance, turn=self.turn_id, error=type(exc).__name__
            )


def _unique(tools: Sequence[Tool[Any]]) -> dict[str, Tool[Any]]:
    by_name: dict[str, Tool[Any]] = {}
    for tool in tools:
        by_name.setdefault(tool.name, tool)
    return by_name


def _arguments(args: Mapping[str, Any]) -> str:
    try:
        text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(args)
    return scrub(redact_text(text))


def _cut(result: ToolResult) -> ToolResult:
    if len(result.text) <= MAX_RESULT_CHARS:
        return result
    cut = len(result.text) - MAX_RESULT_CHARS
    note = f"\n… [{cut} more characters cut: a tool result is at most {MAX_RESULT_CHARS}]"
    return ToolResult(result.text[:MAX_RESULT_CHARS] + note, result.is_error)


class FleetServices(Protocol):
    """What a toolbox reads of the fleet's shared services (``nanoslack.services.Services``
    is one): declared here, so the tools need not import the root's services."""

    @property
    def store(self) -> Store: ...
    @property
    def tools(self) -> ToolSettings: ...
    @property
    def owners(self) -> tuple[str, ...]: ...
    @property
    def ledger(self) -> TokenLedger | None: ...
    @property
    def dollars(self) -> DollarLedger | None: ...
    @property
    def daily_tokens(self) -> Callable[[str], int | None]: ...
    @property
    def daily_usd(self) -> Callable[[str], float | None]: ...


@dataclass(frozen=True)
class Toolboxes:
    """Builds each turn's toolbox for one instance: the fleet's services (store, tool
    settings, owners, ledgers and daily caps) plus the instance's own parts."""

    services: FleetServices
    instance: str
    skills_dir: Path
    room_budget: RoomBudget | None = None
    mcp: McpTools | None = None
    approver: ToolApprover | None = None
    # The fleet's further tool families (notes, team rooms, routines), built for each turn.
    toolsets: Sequence[ToolFamily] = ()
    # Where ``ask_agent`` runs an ask (the asked instance's turns); None: not offered.
    ask: AskRoute | None = None

    def for_turn(
        self,
        turn_id: int,
        turn: Turn,
        msgs: Sequence[MessageRow],
        *,
        max_steps: int | None = None,
        own_tokens_left: Callable[[], int | None] | None = None,
        asked: AskedBy | None = None,
    ) -> TurnToolbox:
        """``asked``: the turn answers a teammate's ask (docs/agents.md "Asking a teammate")."""
        services, effects = self.services, TurnEffects()
        settings = services.tools
        host = HostTools(
            HostContext(
                instance=self.instance,
                skills_dir=self.skills_dir,
                owners=services.owners,
                # A routine's turn in a room has no thread yet, and is no DM for it.
                is_dm=not turn.thread_ts and not (turn.origin is not None and turn.channel),
                handoff_depth=max((m.handoff_depth for m in msgs), default=0),
                may_hand_off=settings.may_hand_off,
                react_to=react_target(msgs),
                fleet=settings.instances or None,
                asked_by=asked.chain[-1] if asked else "",
                sourced=turn.origin is not None,
                files_seen=turn.files,
            ),
            effects,
        )
        ask = AskTools(
            AskContext(
                instance=self.instance,
                turn_id=turn_id,
                channel=turn.channel,
                may_ask=settings.may_hand_off,
                fleet=settings.instances or None,
                timeout=settings.ask_timeout,
                route=self.ask,
                asked=asked,
                files_seen=turn.files,
            )
        )
        budget = TurnBudget(
            self.instance,
            turn.channel,
            turn_id,
            services.store,
            ledger=services.ledger,
            daily_tokens=services.daily_tokens(self.instance),
            room=self.room_budget if turn.thread_ts else None,
            own_left=own_tokens_left,
            dollars=services.dollars,
            daily_usd=services.daily_usd(self.instance),
        )
        return TurnToolbox(
            turn_id=turn_id,
            instance=self.instance,
            store=services.store,
            host=host,
            budget=budget,
            max_steps=min(max_steps, settings.max_steps(self.instance))
            if max_steps
            else settings.max_steps(self.instance),
            mcp=self.mcp,
            approver=self.approver,
            families=[ask.tools(), *(build(turn_id, turn, msgs, effects) for build in self.toolsets)],
            billed=settings.memory.billed,
        )
