"""An instance's agent keys (docs/configuration.md), read and checked; ``agents.factory``
builds the agent from what this returns and reads no key itself.

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
``NANOSLACK_DAILY_TOKENS`` (integer > 0, unlimited when unset); ``NANOSLACK_DAILY_USD``
(US dollars > 0, unlimited when unset). Every problem is a
``ConfigError`` whose message starts with the key to fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from nanoslack.config.settings import instance_key
from nanoslack.config.values import ConfigError, Malformed

Lookup = Callable[[str], str | None]
N = TypeVar("N", int, float)

BACKENDS = ("openai", "anthropic", "command", "script")
SCRIPT_FILE = "script.json"
# A command agent's default time a turn may take (``NANOSLACK_AGENT_TIMEOUT``).
DEFAULT_TIMEOUT_S = 120.0
_URL_RE = re.compile(r"^https?://[^/\s]+")


@dataclass(frozen=True)
class AgentConfig:
    """What an instance's agent is built from; only the fields of its ``kind`` are set."""

    instance: str
    kind: str
    command: str = ""
    timeout: float = DEFAULT_TIMEOUT_S
    # The script agent's rules file, and the key that named it (its errors cite the key).
    script: Path | None = None
    script_key: str = ""
    model: str = ""
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a log line or an error
    daily_tokens: int | None = None


def agent_config(lookup: Lookup, instance: str, *, teammates_dir: Path) -> AgentConfig:
    """The instance's agent keys, checked; ``ConfigError`` naming the key when one is wrong."""
    kind = backend_kind(lookup, instance)
    keys = InstanceKeys(lookup, instance)
    if kind == "command":
        return AgentConfig(
            instance,
            kind,
            command=keys.required("NANOSLACK_AGENT_COMMAND", "by NANOSLACK_AGENT=command"),
            timeout=keys.seconds("NANOSLACK_AGENT_TIMEOUT", DEFAULT_TIMEOUT_S),
        )
    if kind == "script":
        key, value = keys.get("NANOSLACK_AGENT_SCRIPT")
        path = Path(value).expanduser() if value else Path(teammates_dir) / instance / SCRIPT_FILE
        return AgentConfig(instance, kind, script=path, script_key=key)
    model = keys.required("NANOSLACK_MODEL", f"by NANOSLACK_AGENT={kind}")
    cap = daily_tokens(lookup, instance)  # a malformed cap is refused at start, with its key
    daily_usd(lookup, instance)
    if kind == "openai":
        base_url, api_key = keys.url("OPENAI_BASE_URL"), keys.get("OPENAI_API_KEY")[1]
    else:
        base_url, api_key = keys.url("ANTHROPIC_BASE_URL"), _anthropic_key(keys)
    return AgentConfig(instance, kind, model=model, base_url=base_url, api_key=api_key, daily_tokens=cap)


def backend_kind(lookup: Lookup, instance: str) -> str:
    """The instance's back end name, validated (``run`` checks this for every instance at start)."""
    keys = InstanceKeys(lookup, instance)
    key, value = keys.get("NANOSLACK_AGENT")
    if value is None:
        raise ConfigError(
            f"{key}: no agent back end configured for instance {instance!r}; "
            f"set it to one of {', '.join(BACKENDS)}"
        )
    kind = value.lower()
    if kind not in BACKENDS:
        raise ConfigError(unknown_backend(key, value, "none: the instance is skipped").words())
    return kind


def unknown_backend(key: str, value: str, using: str) -> Malformed:
    """A back end name that is not one of ``BACKENDS``: ``run`` and ``doctor`` skip the
    instance, the demo runs its script crew; both say it in these words."""
    return Malformed(key, value, f"one of {', '.join(BACKENDS)}", using)


def daily_tokens(lookup: Lookup, instance: str) -> int | None:
    """``NANOSLACK_DAILY_TOKENS[_<SUF>]``: the instance's daily token cap (None: unlimited);
    the turns' tools enforce it before every model call."""
    return InstanceKeys(lookup, instance).positive_int("NANOSLACK_DAILY_TOKENS")


def daily_usd(lookup: Lookup, instance: str) -> float | None:
    """``NANOSLACK_DAILY_USD[_<SUF>]``: the instance's daily cap in US dollars (None:
    unlimited), on the prices of its model calls (docs/agents.md); enforced as the token cap is."""
    return InstanceKeys(lookup, instance).positive_number("NANOSLACK_DAILY_USD", "US dollars > 0")


SlackView = Literal["agent", "assistant"]
SLACK_VIEWS: tuple[SlackView, ...] = ("agent", "assistant")


def slack_view(lookup: Lookup, instance: str) -> SlackView:
    """``NANOSLACK_SLACK_VIEW[_<SUF>]``: how the instance's Slack app shows its DM
    (docs/agent-surface.md): ``agent`` (the default: ``features.agent_view``, what
    ``nanoslack manifest`` prints) or ``assistant`` (an app made with ``assistant_view``,
    which Slack is retiring). Both apps are served; the key says which one this is."""
    key, value = InstanceKeys(lookup, instance).get("NANOSLACK_SLACK_VIEW")
    if value is None:
        return "agent"
    lowered = value.lower()
    for view in SLACK_VIEWS:
        if lowered == view:
            return view
    raise ConfigError(f"{key}: expected agent or assistant, got {value!r}")


def _anthropic_key(keys: InstanceKeys) -> str:
    _key, value = keys.get("ANTHROPIC_API_KEY")
    if value is None:
        # Name the bare key: that is the one an operator sets for every instance.
        raise ConfigError(
            f"ANTHROPIC_API_KEY: required by NANOSLACK_AGENT=anthropic (instance {keys.instance!r})"
        )
    return value


class InstanceKeys:
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
        return _number(key, value, int, lambda n: n > 0, "an integer > 0")

    def positive_number(self, base: str, expected: str) -> float | None:
        key, value = self.get(base)
        if value is None:
            return None
        return _number(key, value.removeprefix("$"), float, lambda n: n > 0 and math.isfinite(n), expected)

    def seconds(self, base: str, default: float) -> float:
        key, value = self.get(base)
        if value is None:
            return default
        return _number(key, value, float, lambda n: n > 0 and math.isfinite(n), "a number of seconds > 0")


def _number(key: str, value: str, kind: Callable[[str], N], ok: Callable[[N], bool], expected: str) -> N:
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise ConfigError(f"{key}: expected {expected}, got {value!r}")
    return number
