"""Build an instance's agent from its checked keys (``config.agent``: which keys, how
they resolve per instance, what each may hold)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2

from nanoslack.agents.command import CommandAgent, McpEndpoints, sweep_turn_folders
from nanoslack.agents.http import Sleep
from nanoslack.agents.script import RulesError, ScriptAgent
from nanoslack.agents.types import Agent
from nanoslack.config import ConfigError
from nanoslack.config.agent import AgentConfig, Lookup, agent_config

if TYPE_CHECKING:
    from nanoslack.agents.anthropic import AnthropicAgent
    from nanoslack.agents.openai import OpenAIAgent


def build_agent(
    settings_lookup: Lookup,
    instance: str,
    *,
    http: httpx2.AsyncClient,
    teammates_dir: Path,
    sleep: Sleep = asyncio.sleep,
    mcp: McpEndpoints | None = None,
) -> Agent:
    """The agent for ``instance``; ``ConfigError`` naming the key when it cannot be built.

    ``sleep`` is the LLM back ends' retry wait (injectable for tests); ``mcp`` serves a
    ``command`` agent's turns their host tools (``NANOSLACK_MCP_URL``/``_TOKEN``).
    """
    config = agent_config(settings_lookup, instance, teammates_dir=teammates_dir)
    if config.kind == "command":
        # Built at start: what a SIGKILLed run's turns left in the temp dir goes now.
        sweep_turn_folders()
        return CommandAgent(config.command, timeout=config.timeout, instance=instance, mcp=mcp)
    if config.kind == "script":
        return _script(config)
    return _llm(config, http, sleep)


def _llm(config: AgentConfig, http: httpx2.AsyncClient, sleep: Sleep) -> Agent:
    # Imported here: pydantic-ai and the SDKs take a while to load, and only these back ends need them.
    backend: type[OpenAIAgent] | type[AnthropicAgent]
    if config.kind == "openai":
        from nanoslack.agents.openai import OpenAIAgent as backend
    else:
        from nanoslack.agents.anthropic import AnthropicAgent as backend
    return backend(
        http,
        base_url=config.base_url,
        api_key=config.api_key,  # config.agent requires one for anthropic
        model=config.model,
        instance=config.instance,
        sleep=sleep,
    )


def _script(config: AgentConfig) -> ScriptAgent:
    assert config.script is not None
    try:
        return ScriptAgent(config.script, instance=config.instance)
    except RulesError as exc:
        raise ConfigError(f"{config.script_key}: {exc}") from exc
