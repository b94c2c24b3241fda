"""Settings: the keys of docs/configuration.md, read from ``.env`` and the environment.

``.env`` is read with ``dotenv_values`` and merged under the real environment.
Loading settings never writes to the process environment, so several fleets (or
tests) can load different files in one interpreter.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from nanoslack.config.a2a import (
    DEFAULT_A2A_TTL,
    DEFAULT_MAX_HOPS,
    A2AConfig,
    A2AConfigSource,
    parse_max_hops,
    parse_rooms,
)
from nanoslack.config.files import FileSettings, parse_file_settings
from nanoslack.config.lease import LeaseTimings
from nanoslack.config.surface import SurfaceSettings, parse_surface_settings
from nanoslack.config.tools import ToolSettings, parse_tool_settings
from nanoslack.config.values import (
    TZ_KEY,
    ConfigError,
    Malformed,
    Silent,
    ValueLog,
    positive_int,
    read_env_file,
    split_list,
    time_zone,
    warn_malformed,
)
from nanoslack.eventloop import EventLoopName
from nanoslack.logs import get_logger
from nanoslack.secret import Secret

DEFAULT_INSTANCE = "default"
INSTANCE_NAME_RE = re.compile(r"^[a-z0-9_-]+$")

DEFAULT_API_URL = "https://slack.com/api/"
DEFAULT_DB = "data/nanoslack.db"
DEFAULT_TEAMMATES = "teammates"
DEFAULT_MAX_TURNS = 8
DEFAULT_POST_RATE = 1.0
DEFAULT_RETENTION_DAYS = 14
DEFAULT_SHUTDOWN_GRACE = 20.0
METRICS_ADDR_KEY = "NANOSLACK_METRICS_ADDR"
ROOM_TOKENS_KEY = "NANOSLACK_ROOM_TOKENS"
ROOM_USD_KEY = "NANOSLACK_ROOM_USD"
HOP_SCOPES = ("identity", "room")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("console", "json")
EVENT_LOOPS: tuple[EventLoopName, ...] = ("uvloop", "asyncio")
USER_ID_RE = re.compile(r"^[UW][A-Z0-9]+$")

HopScope = Literal["identity", "room"]
LogFormat = Literal["console", "json"]

_log = get_logger(__name__)


def env_suffix(name: str) -> str:
    """``gh-bot`` → ``GH_BOT``: the ``<SUF>`` of per-instance keys."""
    return name.upper().replace("-", "_")


def instance_key(base: str, name: str) -> str:
    """The key holding ``base`` for instance ``name`` (``default`` uses the bare key)."""
    return base if name == DEFAULT_INSTANCE else f"{base}_{env_suffix(name)}"


def bot_token_key(name: str) -> str:
    return instance_key("SLACK_BOT_TOKEN", name)


def app_token_key(name: str) -> str:
    return instance_key("SLACK_APP_TOKEN", name)


@dataclass(frozen=True)
class InstanceSettings:
    name: str
    bot_token: Secret
    app_token: Secret


@dataclass(frozen=True)
class Settings:
    instances: tuple[InstanceSettings, ...]
    skipped: tuple[tuple[str, str], ...]
    api_url: str
    owners: tuple[str, ...]
    db_url: str
    hop_scope: HopScope
    a2a_ttl: float
    log_level: str
    log_format: LogFormat
    env_file: Path
    teammates_dir: Path
    # Agent calls running at once, fleet-wide (NANOSLACK_MAX_TURNS).
    max_turns: int = 8
    # Finished rows older than this are pruned (NANOSLACK_RETENTION_DAYS).
    retention_days: int = DEFAULT_RETENTION_DAYS
    # Posts per second per channel and instance once a burst of 3 is spent (0: unpaced).
    post_rate: float = DEFAULT_POST_RATE
    # Agents with tools (docs/agents.md): steps, handoffs, timeouts, broadcast, the reaction.
    tools: ToolSettings = field(default_factory=ToolSettings)
    # Slack's agent surface: streamed replies, the status line (NANOSLACK_STREAM, …).
    surface: SurfaceSettings = field(default_factory=SurfaceSettings)
    # Seconds running turns may finish after SIGTERM (NANOSLACK_SHUTDOWN_GRACE).
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    # The loop ``run`` serves the fleet on (NANOSLACK_EVENT_LOOP, nanoslack/eventloop.py).
    event_loop: EventLoopName = "uvloop"
    # Merged view (.env under the environment). repr=False: it holds API keys.
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The real-environment layer alone, so the A2A source can keep it on top on reloads.
    process_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # Every value that did not parse, and what is used instead (doctor's ✗ lines; run warned).
    malformed: tuple[Malformed, ...] = ()
    # Read at load like every other key, so each malformed one is reported once, there.
    a2a_at_load: A2AConfig = field(default_factory=lambda: A2AConfig(frozenset(), DEFAULT_MAX_HOPS))
    room_token_cap: int | None = None
    room_usd_cap: float | None = None
    tz: dt.tzinfo = dt.UTC
    leases: LeaseTimings = field(default_factory=LeaseTimings)
    # Files in (docs/agents.md "Files"): NANOSLACK_FILE_CHARS, _MAX_BYTES, _FETCHES, _TIMEOUT.
    files: FileSettings = field(default_factory=FileSettings)

    def value(self, key: str) -> str | None:
        """A key of the merged view; empty counts as unset."""
        return self.env.get(key) or None

    @property
    def metrics_addr(self) -> tuple[str, int] | None:
        """Where ``/metrics``, ``/healthz`` and ``/readyz`` are served; None: off.
        Raises ``ConfigError`` naming the key when the value is not ``host:port``."""
        return parse_host_port(METRICS_ADDR_KEY, self.value(METRICS_ADDR_KEY))

    def instance(self, name: str) -> InstanceSettings | None:
        return next((i for i in self.instances if i.name == name), None)

    @property
    def instance_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instances)

    @property
    def a2a(self) -> A2AConfig:
        """The A2A keys as of load time (the running fleet uses ``a2a_source()``)."""
        return self.a2a_at_load

    def a2a_source(self, *, clock: Callable[[], float] = time.monotonic) -> A2AConfigSource:
        """The A2A keys re-read while the fleet runs; it starts from what was read at load,
        so a malformed value is not reported a second time until its text changes."""
        raw = tuple(self.env.get(key) for key in A2AConfigSource.KEYS)
        return A2AConfigSource(
            self.env_file,
            environ=self.process_env,
            ttl=self.a2a_ttl,
            clock=clock,
            seed=(raw, self.a2a_at_load),
        )

    def room_tokens(self) -> int | None:
        """NANOSLACK_ROOM_TOKENS: unset → unlimited; not an integer > 0 → unlimited, reported."""
        return self.room_token_cap

    def room_usd(self) -> float | None:
        """NANOSLACK_ROOM_USD: unset → unlimited; not a number of dollars > 0 → unlimited, reported."""
        return self.room_usd_cap

    def routine_tz(self) -> dt.tzinfo:
        """NANOSLACK_TZ (default UTC); an unknown zone is UTC, reported at load."""
        return self.tz

    def lease_timings(self) -> LeaseTimings:
        """NANOSLACK_LEASE_SECONDS and NANOSLACK_LEASE_HEARTBEAT (docs/operations.md)."""
        return self.leases


# -- small parsers --------------------------------------------------------------------------


def _room_tokens(env: Mapping[str, str], log: Any) -> int | None:
    raw = env.get(ROOM_TOKENS_KEY, "").strip()
    if not raw:
        return None
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    warn_malformed(log, ROOM_TOKENS_KEY, raw, "an integer > 0", "unlimited")
    return None


def _room_usd(env: Mapping[str, str], log: Any) -> float | None:
    raw = env.get(ROOM_USD_KEY, "").strip()
    if not raw:
        return None
    try:
        value = float(raw.removeprefix("$"))
    except ValueError:
        value = -1.0
    if value > 0 and math.isfinite(value):
        return value
    warn_malformed(log, ROOM_USD_KEY, raw, "US dollars > 0", "unlimited")
    return None


def _tz(env: Mapping[str, str], log: Any) -> dt.tzinfo:
    tz, problem = time_zone(env.get(TZ_KEY))
    if problem is not None:
        warn_malformed(log, problem.key, problem.value, problem.expected, problem.using)
    return tz


def _parse_choice(env: Mapping[str, str], key: str, choices: Iterable[str], default: str, log: Any) -> str:
    raw = env.get(key, "")
    if not raw.strip():
        return default
    value = raw.strip().lower()
    options = tuple(choices)
    if value in options:
        return value
    warn_malformed(log, key, raw, " or ".join(options), default)
    return default


def _post_rate(env: Mapping[str, str], log: Any) -> float:
    raw = env.get("NANOSLACK_POST_RATE", "").strip()
    if not raw:
        return DEFAULT_POST_RATE
    try:
        rate = float(raw)
    except ValueError:
        rate = -1.0
    if 0 <= rate < float("inf"):
        return rate
    warn_malformed(log, "NANOSLACK_POST_RATE", raw, "posts per second >= 0 (0: unpaced)", DEFAULT_POST_RATE)
    return DEFAULT_POST_RATE


def _grace(env: Mapping[str, str], log: Any) -> float:
    raw = env.get("NANOSLACK_SHUTDOWN_GRACE", "").strip()
    if not raw:
        return DEFAULT_SHUTDOWN_GRACE
    try:
        grace = float(raw)
    except ValueError:
        grace = -1.0
    if 0 <= grace < float("inf"):
        return grace
    warn_malformed(log, "NANOSLACK_SHUTDOWN_GRACE", raw, "a number of seconds >= 0", DEFAULT_SHUTDOWN_GRACE)
    return DEFAULT_SHUTDOWN_GRACE


_HOST_PORT_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d{1,5})$")


def parse_host_port(key: str, value: str | None) -> tuple[str, int] | None:
    """``host:port`` (``[::1]:9464`` for IPv6; port 0: any free one); empty → None."""
    raw = (value or "").strip()
    if not raw:
        return None
    match = _HOST_PORT_RE.match(raw)
    port = int(match["port"]) if match else -1
    if match is None or not 0 <= port <= 65535:
        raise ConfigError(f"{key}: expected host:port such as 127.0.0.1:9464, got {raw!r}")
    return match["v6"] or match["host"], port


def _parse_ttl(env: Mapping[str, str], log: Any) -> float:
    raw = env.get("SLACK_A2A_CONFIG_TTL", "")
    if not raw.strip():
        return DEFAULT_A2A_TTL
    try:
        ttl = float(raw.strip())
    except ValueError:
        ttl = -1.0
    # NaN and infinity fail this too: a cache that never expires defeats the key's purpose.
    if 0 <= ttl < float("inf"):
        return ttl
    warn_malformed(log, "SLACK_A2A_CONFIG_TTL", raw, "a number of seconds >= 0", DEFAULT_A2A_TTL)
    return DEFAULT_A2A_TTL


# -- loading ---------------------------------------------------------------------------------


def _merged_env(env_file: Path, environ: Mapping[str, str]) -> dict[str, str]:
    merged = read_env_file(env_file)
    merged.update(environ)
    return merged


def _instance_names(env: Mapping[str, str], log: Any) -> list[str]:
    names: list[str] = []
    if env.get("SLACK_BOT_TOKEN"):
        names.append(DEFAULT_INSTANCE)
    for name in split_list(env.get("SLACK_INSTANCES")):
        if not INSTANCE_NAME_RE.match(name):
            warn_malformed(
                log, "SLACK_INSTANCES", name, "an instance name matching [a-z0-9_-]+", "that name skipped"
            )
            continue
        if name not in names:
            names.append(name)
    return names


def configured_instances(env: Mapping[str, str]) -> tuple[str, ...]:
    """The instances ``env`` configures (``SLACK_INSTANCES``, and ``default`` with
    ``SLACK_BOT_TOKEN``), tokens or not: what a command given an instance checks it
    against (docs/operations.md). Silent: loading the settings already warned."""
    return tuple(_instance_names(env, Silent()))


_EXPECTED_PREFIX = {"SLACK_BOT_TOKEN": "xoxb-", "SLACK_APP_TOKEN": "xapp-"}


def _instance(env: Mapping[str, str], name: str, log: Any) -> InstanceSettings | str:
    """The instance's settings, or the first token key found missing."""
    tokens: dict[str, Secret] = {}
    for base in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"):
        key = instance_key(base, name)
        value = env.get(key, "").strip()
        if not value:
            return key
        if not value.startswith(_EXPECTED_PREFIX[base]):
            # Swapped bot/app tokens are a classic mistake; Slack's own error is cryptic.
            log.warning(
                f"config value malformed: {key}",
                key=key,
                value=Secret(value),
                expected=f"a token starting with {_EXPECTED_PREFIX[base]}",
                using="as given",
            )
        tokens[base] = Secret(value)
    return InstanceSettings(name, tokens["SLACK_BOT_TOKEN"], tokens["SLACK_APP_TOKEN"])


def _instances(
    env: Mapping[str, str], log: Any
) -> tuple[tuple[InstanceSettings, ...], tuple[tuple[str, str], ...]]:
    ready: list[InstanceSettings] = []
    skipped: list[tuple[str, str]] = []
    for name in _instance_names(env, log):
        result = _instance(env, name, log)
        if isinstance(result, str):
            log.warning("instance skipped: credentials missing", instance=name, key=result)
            skipped.append((name, result))
        else:
            ready.append(result)
    return tuple(ready), tuple(skipped)


def _api_url(env: Mapping[str, str]) -> str:
    url = env.get("SLACK_API_URL", "").strip() or DEFAULT_API_URL
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"SLACK_API_URL: expected an http(s) URL, got {url!r}")
    # slack-sdk joins method names onto the base: without the slash "…/apiauth.test".
    return url if url.endswith("/") else url + "/"


def _owners(env: Mapping[str, str], log: Any) -> tuple[str, ...]:
    owners = []
    for item in split_list(env.get("SLACK_OWNER")):
        if USER_ID_RE.match(item):
            owners.append(item)
        else:
            warn_malformed(log, "SLACK_OWNER", item, "Slack user ids (U… or W…)", "that entry skipped")
    return tuple(owners)


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _teammates(env: Mapping[str, str], base: Path) -> Path:
    return _resolve(base, env.get("NANOSLACK_TEAMMATES", "").strip() or DEFAULT_TEAMMATES)


def teammates_dir(env_file: Path | str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The teammates folder as ``run`` finds it, for a command that needs nothing else of the
    configuration (``manifest``): ``NANOSLACK_TEAMMATES`` from the environment over ``.env``
    (default: the cwd's), relative to the ``.env``'s folder; default ``teammates``."""
    path = (Path(env_file) if env_file is not None else Path.cwd() / ".env").expanduser().resolve()
    return _teammates(_merged_env(path, dict(os.environ if environ is None else environ)), path.parent)


def database_url(env: Mapping[str, str], base: Path) -> str:
    """The store's URL, the one rule every command follows: ``DATABASE_URL`` (an
    SQLAlchemy URL), else ``NANOSLACK_DB`` (default ``data/nanoslack.db``), an SQLite file
    resolved against ``base``, the ``.env``'s folder."""
    url = env.get("DATABASE_URL", "").strip()
    if url:
        if "://" not in url:
            raise ConfigError(f"DATABASE_URL: expected an SQLAlchemy URL such as sqlite:///path, got {url!r}")
        return url
    db = env.get("NANOSLACK_DB", "").strip() or DEFAULT_DB
    return "sqlite:///" + str(_resolve(base, db))


def load_settings(
    env_file: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    log: Any = None,
) -> Settings:
    """Read the keys of docs/configuration.md: ``.env`` (default: the cwd's) under the real environment.

    Problems with one instance or one value are warnings with a default applied; only
    a configuration nothing can run with raises ``ConfigError``.
    """
    report = ValueLog(log or _log)
    path = Path(env_file) if env_file is not None else Path.cwd() / ".env"
    path = path.expanduser().resolve()
    process_env = dict(os.environ if environ is None else environ)
    env = _merged_env(path, process_env)
    base = path.parent
    instances, skipped = _instances(env, report)
    names = (*(i.name for i in instances), *(n for n, _ in skipped))
    return Settings(
        instances=instances,
        skipped=skipped,
        api_url=_api_url(env),
        owners=_owners(env, report),
        db_url=database_url(env, base),
        hop_scope=cast(HopScope, _parse_choice(env, "SLACK_A2A_HOP_SCOPE", HOP_SCOPES, "identity", report)),
        a2a_ttl=_parse_ttl(env, report),
        log_level=_parse_choice(env, "LOG_LEVEL", LOG_LEVELS, "info", report),
        log_format=cast(LogFormat, _parse_choice(env, "LOG_FORMAT", LOG_FORMATS, "console", report)),
        env_file=path,
        teammates_dir=_teammates(env, base),
        max_turns=positive_int(env, "NANOSLACK_MAX_TURNS", DEFAULT_MAX_TURNS, report),
        retention_days=positive_int(env, "NANOSLACK_RETENTION_DAYS", DEFAULT_RETENTION_DAYS, report),
        post_rate=_post_rate(env, report),
        tools=parse_tool_settings(env, names, env_suffix, report),
        surface=parse_surface_settings(env, report),
        shutdown_grace=_grace(env, report),
        event_loop=cast(
            EventLoopName, _parse_choice(env, "NANOSLACK_EVENT_LOOP", EVENT_LOOPS, "uvloop", report)
        ),
        env=types.MappingProxyType(env),
        process_env=types.MappingProxyType(process_env),
        a2a_at_load=A2AConfig(
            parse_rooms(env.get("SLACK_A2A_ROOMS")), parse_max_hops(env.get("SLACK_A2A_MAX_HOPS"), report)
        ),
        room_token_cap=_room_tokens(env, report),
        room_usd_cap=_room_usd(env, report),
        tz=_tz(env, report),
        leases=LeaseTimings.from_env(env, report),
        files=parse_file_settings(env, database_url(env, base), base, report),
        malformed=tuple(report.found),
    )
