"""Agents with tools (docs/agents.md): what a turn's agent may call, and what it spends.

``host`` holds the fleet's own tools (``send_message``, ``read_skill``,
``send_to_agent``, ``message_owner``), whose effects are committed with the turn;
``team`` the team rooms' (``report``, ``vote``, ``ballot``, ``directive``), a ``ToolSet``;
``toolbox`` puts one turn's tools and budgets together (``agents.Tools``); the
instance's core builds a toolbox for every turn (``nanoslack.core``).
"""

from nanoslack.tools.host import HOST_TOOL_NAMES, SPECS, Handoff, HostContext, HostTools, TurnEffects
from nanoslack.tools.toolbox import (
    McpTools,
    ToolApprover,
    Toolboxes,
    ToolSet,
    ToolSetFactory,
    TurnBudget,
    TurnToolbox,
)

__all__ = [
    "HOST_TOOL_NAMES",
    "SPECS",
    "Handoff",
    "HostContext",
    "HostTools",
    "McpTools",
    "ToolApprover",
    "ToolSet",
    "ToolSetFactory",
    "Toolboxes",
    "TurnBudget",
    "TurnEffects",
    "TurnToolbox",
]
