"""``LocalTools``: the ``Tools`` of an agent run on its own, outside a fleet.

A back end run by hand or in a test has no turn row, no store and no siblings: its
``send_message`` posts are collected in ``posts``, ``read_skill`` reads a skills folder,
the other host tools answer that they need a fleet, and a ``TokenLedger`` with a daily
cap stands in for the budgets. The fleet's own implementation is ``nanoslack.tools``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from nanoslack.agents.teammates import list_skills
from nanoslack.agents.types import BudgetExhausted, ToolResult, ToolSpec
from nanoslack.agents.usage import TokenLedger

log = structlog.get_logger("nanoslack.agents")

DEFAULT_MAX_STEPS = 12


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


SEND_MESSAGE_SPEC = ToolSpec(
    "send_message",
    "Post one message to the conversation. Not calling it means you stay silent.",
    _object({"text": {"type": "string", "description": "The message text."}}, ["text"]),
)
READ_SKILL_SPEC = ToolSpec(
    "read_skill",
    "Read one of the shared skills listed in your instructions, by name.",
    _object({"name": {"type": "string", "description": "The skill's name."}}, ["name"]),
)


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
    extra: Sequence[ToolSpec] = ()  # more tools to offer (their calls are recorded, answered "ok")
    posts: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def max_steps(self) -> int:
        return self.steps_allowed

    def specs(self) -> Sequence[ToolSpec]:
        return (SEND_MESSAGE_SPEC, READ_SKILL_SPEC, *self.extra)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        args = dict(arguments)
        self.calls.append((name, args))
        result = self._call(name, args)
        self.steps.append(Step("tool", name, error=result.text if result.is_error else None))
        return result

    def _call(self, name: str, args: dict[str, Any]) -> ToolResult:
        if name == "send_message":
            text = args.get("text")
            if not isinstance(text, str) or not text.strip():
                return ToolResult("nothing posted: the text is empty", is_error=True)
            self.posts.append(text.strip())
            return ToolResult("posted")
        if name == "read_skill":
            known = list_skills(self.skills_dir) if self.skills_dir else []
            wanted = str(args.get("name") or "")
            if self.skills_dir is not None and wanted in known:
                return ToolResult((self.skills_dir / f"{wanted}.md").read_text(encoding="utf-8"))
            return ToolResult(
                f"no skill named {wanted!r}; the skills are: {', '.join(known) or 'none'}", True
            )
        if any(spec.name == name for spec in self.extra):
            return ToolResult("ok")
        return ToolResult(f"unknown tool {name!r}", is_error=True)

    def before_model_call(self) -> None:
        if self.daily_tokens is not None and self.ledger is not None:
            used = self.ledger.used_today(self.instance)
            if used >= self.daily_tokens:
                log.warning("budget exhausted", instance=self.instance, used=used, cap=self.daily_tokens)
                raise BudgetExhausted(
                    f"daily token budget spent: {used} of {self.daily_tokens} tokens used today"
                )

    def after_model_call(
        self, *, model: str, tokens: int, ms: float, error: str | None = None, cached_tokens: int = 0
    ) -> None:
        if self.ledger is not None and tokens > 0:
            self.ledger.add(self.instance, tokens)
        self.steps.append(Step("model", model, tokens=tokens, error=error))
