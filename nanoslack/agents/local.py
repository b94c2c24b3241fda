"""``LocalTools``: the ``Tools`` of an agent run on its own, outside a fleet.

A back end run by hand or in a test has no turn row, no store and no siblings: its
``send_message`` posts are collected in ``posts``, ``read_skill`` reads a skills folder
(both declared once, in ``agents.tool``, for the fleet's host tools too), the other host
tools are not offered, and a ``TokenLedger`` with a daily cap stands in for the budgets.
The fleet's own implementation is ``nanoslack.tools``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoslack.agents.teammates import list_skills
from nanoslack.agents.tool import (
    READ_SKILL,
    READ_SKILL_DESCRIPTION,
    SEND_MESSAGE,
    SEND_MESSAGE_DESCRIPTION,
    ReadSkill,
    SendMessage,
    Tool,
    ToolResult,
    dumped,
    find,
)
from nanoslack.agents.types import BudgetExhausted, ModelCall
from nanoslack.agents.usage import TokenLedger
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

DEFAULT_MAX_STEPS = 12


@dataclass
class Step:
    kind: str  # model | tool
    name: str
    tokens: int = 0
    error: str | None = None


@dataclass
class LocalTools:
    instance: str = "local"
    skills_dir: Path | None = None
    ledger: TokenLedger | None = None
    daily_tokens: int | None = None
    steps_allowed: int = DEFAULT_MAX_STEPS
    extra: Sequence[Tool[Any]] = ()  # more tools to offer (their calls are recorded and run)
    posts: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def max_steps(self) -> int:
        return self.steps_allowed

    def tools(self) -> Sequence[Tool[Any]]:
        return (
            Tool(SEND_MESSAGE, SEND_MESSAGE_DESCRIPTION, SendMessage, self._post),
            Tool(READ_SKILL, READ_SKILL_DESCRIPTION, ReadSkill, self._read),
            *self.extra,
        )

    async def call(self, name: str, arguments: object) -> ToolResult:
        self.calls.append((name, dumped(arguments)))
        tool = find(self.tools(), name)
        result = await tool.call(arguments) if tool else ToolResult(f"unknown tool {name!r}", is_error=True)
        self.steps.append(Step("tool", name, error=result.text if result.is_error else None))
        return result

    async def _post(self, args: SendMessage) -> ToolResult:
        if not args.text.strip():
            return ToolResult("nothing posted: the text is empty", is_error=True)
        self.posts.append(args.text.strip())
        return ToolResult("posted")

    async def _read(self, args: ReadSkill) -> ToolResult:
        known = list_skills(self.skills_dir) if self.skills_dir else []
        if self.skills_dir is not None and args.name in known:
            return ToolResult((self.skills_dir / f"{args.name}.md").read_text(encoding="utf-8"))
        return ToolResult(f"no skill named {args.name!r}; the skills are: {', '.join(known) or 'none'}", True)

    def before_model_call(self) -> None:
        if self.daily_tokens is not None and self.ledger is not None:
            used = self.ledger.used_today(self.instance)
            if used >= self.daily_tokens:
                log.warning("budget exhausted", instance=self.instance, used=used, cap=self.daily_tokens)
                raise BudgetExhausted(
                    f"daily token budget spent: {used} of {self.daily_tokens} tokens used today"
                )

    def after_model_call(self, call: ModelCall) -> None:
        if self.ledger is not None and call.tokens > 0:
            self.ledger.add(self.instance, call.tokens)
        self.steps.append(Step("model", call.model, tokens=call.tokens, error=call.error))
