"""Agents with tools (docs/agents.md): what a turn's agent may call, and what it spends.

Every tool is of one shape (``agents.tool.Tool``: a name, a description, a pydantic model
of its arguments, an async function). ``host`` holds the fleet's own tools
(``send_message``, ``read_skill``, ``send_to_agent``, ``message_owner``, ``react``,
``send_file``), whose effects are
committed with the turn; ``team`` the team rooms' (``report``, ``vote``, ``ballot``,
``directive``); ``memory`` the notes' (``remember``, ``forget``, ``recall``); ``mcp`` a
teammate's MCP servers' tools; ``toolbox`` puts one turn's tools and budgets together
(``agents.Tools``); ``serve`` offers a turn's host tools to a ``command`` agent over MCP.
The instance's core builds a toolbox for every turn (``nanoslack.core``).
"""

from nanoslack.tools.host import HOST_TOOL_NAMES, FileOut, Handoff, HostContext, HostTools, TurnEffects
from nanoslack.tools.toolbox import (
    McpTools,
    ToolApprover,
    Toolboxes,
    ToolFamily,
    TurnBudget,
    TurnToolbox,
)

__all__ = [
    "FileOut",
    "HOST_TOOL_NAMES",
    "Handoff",
    "HostContext",
    "HostTools",
    "McpTools",
    "ToolApprover",
    "ToolFamily",
    "Toolboxes",
    "TurnBudget",
    "TurnEffects",
    "TurnToolbox",
]
