"""Agents (docs/agents.md): teammates, the turn prompt and the four back ends.

Self-contained: nothing here talks to Slack or the store. The turn scheduler
(``nanoslack.turns.scheduler``) builds a ``Turn`` and calls ``Agent.run``; the turn
recorder (``nanoslack.turns.record``) records the ``Reply``'s posts for the poster.
"""

from typing import TYPE_CHECKING, Any

from nanoslack.agents.command import CommandAgent
from nanoslack.agents.factory import build_agent
from nanoslack.agents.http import make_http_client
from nanoslack.agents.local import LocalTools
from nanoslack.agents.prompt import WRAPPING_UP_CUE, render_prompt, render_thread
from nanoslack.agents.script import RulesError, ScriptAgent
from nanoslack.agents.teammates import Teammate, load_teammate
from nanoslack.agents.tool import Tool, ToolResult
from nanoslack.agents.types import (
    Agent,
    BudgetExhausted,
    Line,
    ModelCall,
    PastTurn,
    Reply,
    SeenFile,
    Tools,
    Turn,
    TurnFailed,
    TurnOrigin,
)
from nanoslack.agents.usage import MemoryLedger, TokenLedger

if TYPE_CHECKING:
    from nanoslack.agents.anthropic import AnthropicAgent
    from nanoslack.agents.openai import OpenAIAgent

# The LLM back ends load pydantic-ai and the provider SDKs (seconds on a busy machine):
# only a fleet that runs one pays for it, not every CLI command that needs a type here.
_LAZY = {"AnthropicAgent": "nanoslack.agents.anthropic", "OpenAIAgent": "nanoslack.agents.openai"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Agent",
    "AnthropicAgent",
    "BudgetExhausted",
    "CommandAgent",
    "Line",
    "LocalTools",
    "MemoryLedger",
    "ModelCall",
    "OpenAIAgent",
    "PastTurn",
    "Reply",
    "RulesError",
    "ScriptAgent",
    "SeenFile",
    "Teammate",
    "TokenLedger",
    "Tool",
    "ToolResult",
    "Tools",
    "Turn",
    "TurnFailed",
    "TurnOrigin",
    "WRAPPING_UP_CUE",
    "build_agent",
    "load_teammate",
    "make_http_client",
    "render_prompt",
    "render_thread",
    "render_thread",
]
