"""The keys of agents with tools (docs/configuration.md, docs/agents.md), read once at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nanoslack.config.memory import MemorySettings, parse_memory_settings
from nanoslack.config.team import TeamSettings, parse_team_settings
from nanoslack.config.values import positive_int, positive_seconds, split_list, warn_malformed

DEFAULT_MAX_STEPS = 12
DEFAULT_TOOL_TIMEOUT_S = 60.0
DEFAULT_APPROVAL_TIMEOUT_S = 300.0
DEFAULT_ASK_TIMEOUT_S = 120.0
DEFAULT_WORKING_REACTION = "eyes"
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class ToolSettings:
    # NANOSLACK_A2A_ALLOW: the (from, to) pairs that may hand work to each other.
    allow: frozenset[tuple[str, str]] = frozenset()
    chief: str | None = None  # NANOSLACK_CHIEF
    # The teammates a handoff can reach: the instances configured here (SLACK_INSTANCES) and
    # those the allowlist or the chief names (another process may run them).
    instances: tuple[str, ...] = ()
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT_S  # NANOSLACK_TOOL_TIMEOUT
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT_S  # NANOSLACK_TOOL_APPROVAL_TIMEOUT
    ask_timeout: float = DEFAULT_ASK_TIMEOUT_S  # NANOSLACK_ASK_TIMEOUT: how long ask_agent waits
    allow_broadcast: bool = False  # NANOSLACK_ALLOW_BROADCAST
    working_reaction: str = DEFAULT_WORKING_REACTION  # NANOSLACK_WORKING_REACTION ("": none)
    # NANOSLACK_MAX_STEPS and its per-instance NANOSLACK_MAX_STEPS_<SUF>.
    max_steps_default: int = DEFAULT_MAX_STEPS
    max_steps_by_instance: Mapping[str, int] = field(default_factory=dict)
    # Team rooms (docs/team-rooms.md): NANOSLACK_VOTE_REMIND, NANOSLACK_VOTE_CLOSE.
    team: TeamSettings = field(default_factory=TeamSettings)
    # What an agent remembers: NANOSLACK_HISTORY_CHARS, _MEMORY_CHARS, _CACHED_TOKEN_WEIGHT.
    memory: MemorySettings = field(default_factory=MemorySettings)

    def max_steps(self, instance: str) -> int:
        return self.max_steps_by_instance.get(instance, self.max_steps_default)

    def may_hand_off(self, sender: str, recipient: str) -> bool:
        """The allowlist, with the chief exempt both ways (never to oneself)."""
        if sender == recipient:
            return False
        if self.chief is not None and self.chief in (sender, recipient):
            return True
        return (sender, recipient) in self.allow

    def teammates_of(self, me: str) -> tuple[str, ...]:
        """The teammates ``me`` may reach, as its turns' openings list them (docs/agents.md):
        the other instances this fleet names (``instances``); when an allowlist or a chief is
        set, only those it lets ``me`` hand off to, the names a handoff or an ask accepts."""
        others = [name for name in self.instances if name != me]
        if self.allow or self.chief is not None:
            others = [name for name in others if self.may_hand_off(me, name)]
        return tuple(sorted(others))


def parse_tool_settings(
    env: Mapping[str, str], instances: tuple[str, ...], suffix: Any, log: Any
) -> ToolSettings:
    """``suffix(name)`` is the key suffix of an instance (``env_suffix``)."""
    default_steps = positive_int(env, "NANOSLACK_MAX_STEPS", DEFAULT_MAX_STEPS, log)
    by_instance = {}
    for name in instances:
        key = f"NANOSLACK_MAX_STEPS_{suffix(name)}"
        if env.get(key, "").strip():
            by_instance[name] = positive_int(env, key, default_steps, log)
    reaction = env.get("NANOSLACK_WORKING_REACTION")
    allow = _pairs(env, log)
    chief = (env.get("NANOSLACK_CHIEF") or "").strip().lower() or None
    # A teammate another process runs (docs/operations.md, several hosts) is configured
    # there, not here: the allowlist and the chief name it for this process too.
    named = [n for pair in sorted(allow) for n in pair] + ([chief] if chief else [])
    return ToolSettings(
        allow=allow,
        chief=chief,
        instances=tuple(dict.fromkeys([*instances, *named])),
        tool_timeout=positive_seconds(env, "NANOSLACK_TOOL_TIMEOUT", DEFAULT_TOOL_TIMEOUT_S, log),
        approval_timeout=positive_seconds(
            env, "NANOSLACK_TOOL_APPROVAL_TIMEOUT", DEFAULT_APPROVAL_TIMEOUT_S, log
        ),
        ask_timeout=positive_seconds(env, "NANOSLACK_ASK_TIMEOUT", DEFAULT_ASK_TIMEOUT_S, log),
        allow_broadcast=(env.get("NANOSLACK_ALLOW_BROADCAST") or "").strip().lower() in _TRUE,
        working_reaction=DEFAULT_WORKING_REACTION if reaction is None else reaction.strip().strip(":"),
        max_steps_default=default_steps,
        max_steps_by_instance=by_instance,
        team=parse_team_settings(env, log),
        memory=parse_memory_settings(env, log),
    )


def _pairs(env: Mapping[str, str], log: Any) -> frozenset[tuple[str, str]]:
    pairs = set()
    for item in split_list(env.get("NANOSLACK_A2A_ALLOW")):
        sender, sep, recipient = item.partition(">")
        if not sep or not sender.strip() or not recipient.strip():
            warn_malformed(
                log, "NANOSLACK_A2A_ALLOW", item, "from>to pairs such as dana>eli", "that pair skipped"
            )
            continue
        pairs.add((sender.strip().lower(), recipient.strip().lower()))
    return frozenset(pairs)
