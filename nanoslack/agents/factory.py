"""Build an instance's agent from configuration (docs/configuration.md keys).

``lookup`` reads one raw configuration key (``Settings.value`` is exactly that:
``.env`` under the environment, empty = unset). Every key is resolved per instance
first: ``<KEY>_<SUF>``, then the bare ``<KEY>`` (the ``default`` instance uses the
bare key only). So ``NANOSLACK_AGENT_ELI=command`` beats ``NANOSLACK_AGENT=script``
for ``eli``, and a per-instance ``OPENAI_BASE_URL_<SUF>`` may point one instance at
a local Ollama while the others use OpenAI.

Keys: ``NANOSLACK_AGENT`` (openai | anthropic | command | script, required);
``NANOSLACK_AGENT_COMMAND`` (command, required); ``NANOSLACK_AGENT_TIMEOUT``
(command, seconds > 0, default 120); ``NANOSLACK_AGENT_SCRIPT`` (script: rules file,
default ``<teammates>/<instance>/script.json``; a relative path is taken from the
working directory); ``NANOSLACK_MODEL`` (openai/anthropic, required);
``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` (optional: local servers need none);
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` (required for anthropic);
``NANOSLACK_DAILY_TOKENS`` (integer > 0, unlimited when unset). Every problem is a
``ConfigError`` whose message starts with the key to fix.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from pathlib import Path

import httpx2

from nanoslack.agents.command import DEFAULT_TIMEOUT_S, CommandAgent, McpEndpoints, sweep_turn_folders
from nanoslack.agents.http import Sleep
from nanoslack.agents.script import RulesError, ScriptAgent
from nanoslack.agents.types import Agent
from nanoslack.config import ConfigError, instance_key

Lookup = Callable[[str], str | None]

BACKENDS = ("openai", "anthropic", "command", "script")
SCRIPT_FILE = "script.json"
_URL_RE = re.compile(r"^https?://[^/\s]+")


class _Keys:
    """Per-instance-first reads of one instance's keys; remembers which key answered."""

    def __init__(self, lookup: Lookup, instance: str) -> None:
        self._lookup = lookup
        self.instance = instance

    def key(self, base: str) -> str:
        return instance_key(base, self.instance)

    def get(self, base: str) -> tuple[str, str | None]:
        """(the key that holds the value, or the per-instance key when none does; value)."""
        for key in dict.fromkeys((self.key(base), base)):
            value = self._lookup(key)
            if value is not None and value.strip():
                return key, value.strip()
        return self.key(base), None

    def required(self, base: str, why: str) -> str:
        key, value = self.get(base)
        if value is None:
            raise ConfigError(f"{key}: required {why} (instance {self.instance!r})")
        return value

    def url(self, base: str) -> str | None:
        key, value = self.get(base)
        if value is not None and not _URL_RE.match(value):
            raise ConfigError(f"{key}: expected an http(s) URL, got {value!r}")
        return value

    def positive_int(self, base: str) -> int | None:
        key, value = self.get(base)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number <= 0:
            raise ConfigError(f"{key}: expected an integer > 0, got {value!r}")
        return number

    def seconds(self, base: str, default: float) -> float:
        key, value = self.get(base)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = 0.0
        if not (number > 0 and math.isfinite(number)):
            raise ConfigError(f"{key}: expected a number of seconds > 0, got {value!r}")
        return number


def backend_kind(lookup: Lookup, instance: str) -> str:
    """The instance's back end name, validated (``run`` checks this for every instance at start)."""
    keys = _Keys(lookup, instance)
    key, value = keys.get("NANOSLACK_AGENT")
    if value is None:
        raise ConfigError(
            f"{key}: no agent back end configured for instance {instance!r}; "
            f"set it to one of {', '.join(BACKENDS)}"
        )
    kind = value.lower()
    if kind not in BACKENDS:
        raise ConfigError(f"{key}: expected one of {', '.join(BACKENDS)}, got {value!r}")
    return kind


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
    kind = backend_kind(settings_lookup, instance)
    keys = _Keys(settings_lookup, instance)
    if kind == "command":
        command = keys.required("NANOSLACK_AGENT_COMMAND", "by NANOSLACK_AGENT=command")
        timeout = keys.seconds("NANOSLACK_AGENT_TIMEOUT", DEFAULT_TIMEOUT_S)
        # Built at start: what a SIGKILLed run's turns left in the temp dir goes now.
        sweep_turn_folders()
        return CommandAgent(command, timeout=timeout, instance=instance, mcp=mcp)
    if kind == "script":
        return _script(keys, Path(teammates_dir))
    model = keys.required("NANOSLACK_MODEL", f"by NANOSLACK_AGENT={kind}")
    daily_tokens(settings_lookup, instance)  # a malformed cap is refused at start, with its key
    # Imported here: pydantic-ai and the SDKs take a while to load, and only these back ends need them.
    if kind == "openai":
        from nanoslack.agents.openai import OpenAIAgent

        return OpenAIAgent(
            http,
            base_url=keys.url("OPENAI_BASE_URL"),
            api_key=keys.get("OPENAI_API_KEY")[1],
            model=model,
            instance=instance,
            sleep=sleep,
        )
    from nanoslack.agents.anthropic import AnthropicAgent

    api_key = _anthropic_key(keys)
    return AnthropicAgent(
        http,
        base_url=keys.url("ANTHROPIC_BASE_URL"),
        api_key=api_key,
        model=model,
        instance=instance,
        sleep=sleep,
    )


def daily_tokens(settings_lookup: Lookup, instance: str) -> int | None:
    """``NANOSLACK_DAILY_TOKENS[_<SUF>]``: the instance's daily token cap (None: unlimited);
    the turns' tools enforce it before every model call."""
    return _Keys(settings_lookup, instance).positive_int("NANOSLACK_DAILY_TOKENS")


def _anthropic_key(keys: _Keys) -> str:
    _key, value = keys.get("ANTHROPIC_API_KEY")
    if value is None:
        # Name the bare key: that is the one an operator sets for every instance.
        raise ConfigError(
            f"ANTHROPIC_API_KEY: required by NANOSLACK_AGENT=anthropic (instance {keys.instance!r})"
        )
    return value


def _script(keys: _Keys, teammates_dir: Path) -> ScriptAgent:
    key, value = keys.get("NANOSLACK_AGENT_SCRIPT")
    path = Path(value).expanduser() if value else teammates_dir / keys.instance / SCRIPT_FILE
    try:
        return ScriptAgent(path, instance=keys.instance)
    except RulesError as exc:
        raise ConfigError(f"{key}: {exc}") from exc
