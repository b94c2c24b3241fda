"""Configuration: the keys of DESIGN §2, read from ``.env`` and the environment.

``.env`` is read with ``dotenv_values`` and merged under the real environment; the
process environment is never mutated, so several fleets (or tests) can load
different files in one interpreter.
"""

from __future__ import annotations

import os
import re
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import structlog
from dotenv import dotenv_values

DEFAULT_INSTANCE = "default"
INSTANCE_NAME_RE = re.compile(r"^[a-z0-9_-]+$")

DEFAULT_API_URL = "https://slack.com/api/"
DEFAULT_DB = "data/nanoslack.db"
DEFAULT_TEAMMATES = "teammates"
DEFAULT_MAX_HOPS = 6
DEFAULT_A2A_TTL = 30.0
HOP_SCOPES = ("identity", "room")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("console", "json")
USER_ID_RE = re.compile(r"^[UW][A-Z0-9]+$")

HopScope = Literal["identity", "room"]
LogFormat = Literal["console", "json"]

_log = structlog.stdlib.get_logger("nanoslack.config")


class ConfigError(Exception):
    """A configuration the fleet cannot run with; the message names the key."""


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


_TOKEN_PREFIX_RE = re.compile(r"^(xox[a-z]|xapp)-")


class Secret:
    """A token that cannot leak through ``repr``/``str``/f-strings/log fields.

    Only ``reveal()`` hands out the value, so every use of the real token is greppable.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def masked(self) -> str:
        # The prefix tells an operator which kind of token is configured, never its value.
        m = _TOKEN_PREFIX_RE.match(self._value)
        return f"{m.group(1)}-***" if m else "***"

    def __repr__(self) -> str:
        return f"<secret {self.masked()}>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True)
class InstanceSettings:
    name: str
    bot_token: Secret
    app_token: Secret

    @property
    def suffix(self) -> str:
        return env_suffix(self.name)


@dataclass(frozen=True)
class A2AConfig:
    rooms: frozenset[str]
    max_hops: int


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
    # Merged view (.env under the environment). repr=False: it holds API keys.
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The real-environment layer alone, so the A2A source can keep it on top on reloads.
    process_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def value(self, key: str) -> str | None:
        """A key of the merged view; empty counts as unset."""
        return self.env.get(key) or None

    def instance_value(self, base: str, name: str) -> str | None:
        """``<base>_<SUF>`` for instance ``name``, falling back to the bare ``<base>``."""
        return self.value(instance_key(base, name)) or self.value(base)

    def instance(self, name: str) -> InstanceSettings | None:
        return next((i for i in self.instances if i.name == name), None)

    @property
    def instance_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instances)

    @property
    def a2a(self) -> A2AConfig:
        """The A2A keys as of load time (the running fleet uses ``a2a_source()``)."""
        rooms = parse_rooms(self.value("SLACK_A2A_ROOMS"))
        return A2AConfig(rooms, parse_max_hops(self.value("SLACK_A2A_MAX_HOPS")))

    def a2a_source(self, *, clock: Callable[[], float] = time.monotonic) -> A2AConfigSource:
        return A2AConfigSource(self.env_file, environ=self.process_env, ttl=self.a2a_ttl, clock=clock)


# -- small parsers --------------------------------------------------------------------------


def split_list(value: str | None) -> tuple[str, ...]:
    """Comma list: items trimmed, empties ignored, first occurrence kept."""
    if not value:
        return ()
    items = (item.strip() for item in value.split(","))
    return tuple(dict.fromkeys(item for item in items if item))


def parse_rooms(value: str | None) -> frozenset[str]:
    """``' G0A , C0B ,,'`` → ``{"G0A", "C0B"}``; ids match exactly (no case folding)."""
    return frozenset(split_list(value))


def _warn_malformed(log: Any, key: str, value: object, expected: str, default: object) -> None:
    log.warning(
        f"config value malformed: {key}",
        key=key,
        value=value,
        expected=expected,
        using=default,
    )


def parse_max_hops(value: str | None, log: Any = None) -> int:
    """An integer > 0; unset/empty → 6 silently, anything else malformed → 6 with a warning."""
    if value is None or not value.strip():
        return DEFAULT_MAX_HOPS
    try:
        hops = int(value.strip())
    except ValueError:
        hops = 0
    if hops > 0:
        return hops
    _warn_malformed(log or _log, "SLACK_A2A_MAX_HOPS", value, "an integer > 0", DEFAULT_MAX_HOPS)
    return DEFAULT_MAX_HOPS


def _parse_choice(env: Mapping[str, str], key: str, choices: Iterable[str], default: str, log: Any) -> str:
    raw = env.get(key, "")
    if not raw.strip():
        return default
    value = raw.strip().lower()
    options = tuple(choices)
    if value in options:
        return value
    _warn_malformed(log, key, raw, " or ".join(options), default)
    return default


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
    _warn_malformed(log, "SLACK_A2A_CONFIG_TTL", raw, "a number of seconds >= 0", DEFAULT_A2A_TTL)
    return DEFAULT_A2A_TTL


# -- loading ---------------------------------------------------------------------------------


def read_env_file(path: Path) -> dict[str, str]:
    """The file's keys; a missing file is empty (the environment alone may configure)."""
    if not path.is_file():
        return {}
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read env file {path}: {exc}") from exc
    # `KEY` without `=` parses as None: treat it as unset.
    return {k: v for k, v in values.items() if v is not None}


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
            log.warning(
                "config value malformed: SLACK_INSTANCES",
                key="SLACK_INSTANCES",
                value=name,
                expected="instance names matching [a-z0-9_-]+",
                using="that name skipped",
            )
            continue
        if name not in names:
            names.append(name)
    return names


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
            _warn_malformed(log, "SLACK_OWNER", item, "Slack user ids (U… or W…)", "that entry skipped")
    return tuple(owners)


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _db_url(env: Mapping[str, str], base: Path) -> str:
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
    """Read DESIGN §2's keys: ``.env`` (default: the cwd's) under the real environment.

    Problems with one instance or one value are warnings with a default applied; only
    a configuration nothing can run with raises ``ConfigError``.
    """
    log = log or _log
    path = Path(env_file) if env_file is not None else Path.cwd() / ".env"
    path = path.expanduser().resolve()
    process_env = dict(os.environ if environ is None else environ)
    env = _merged_env(path, process_env)
    base = path.parent
    instances, skipped = _instances(env, log)
    return Settings(
        instances=instances,
        skipped=skipped,
        api_url=_api_url(env),
        owners=_owners(env, log),
        db_url=_db_url(env, base),
        hop_scope=cast(HopScope, _parse_choice(env, "SLACK_A2A_HOP_SCOPE", HOP_SCOPES, "identity", log)),
        a2a_ttl=_parse_ttl(env, log),
        log_level=_parse_choice(env, "LOG_LEVEL", LOG_LEVELS, "info", log),
        log_format=cast(LogFormat, _parse_choice(env, "LOG_FORMAT", LOG_FORMATS, "console", log)),
        env_file=path,
        teammates_dir=_resolve(base, env.get("NANOSLACK_TEAMMATES", "").strip() or DEFAULT_TEAMMATES),
        env=types.MappingProxyType(env),
        process_env=types.MappingProxyType(process_env),
    )


# -- the A2A keys, re-read while running ---------------------------------------------------


class A2AConfigSource:
    """``SLACK_A2A_ROOMS``/``SLACK_A2A_MAX_HOPS`` with a TTL cache.

    Called on every bot message, so a cached ``get()`` is one clock read and a compare.
    After the TTL the file is re-read, so an operator's edit (or ``open-a2a-room``)
    takes effect without a restart. The environment still wins over the file.
    """

    KEYS = ("SLACK_A2A_ROOMS", "SLACK_A2A_MAX_HOPS")

    def __init__(
        self,
        env_file: Path,
        environ: Mapping[str, str] | None = None,
        ttl: float = DEFAULT_A2A_TTL,
        clock: Callable[[], float] = time.monotonic,
        *,
        log: Any = None,
    ) -> None:
        self._env_file = Path(env_file)
        self._environ = environ
        self._ttl = ttl
        self._clock = clock
        self._log = log or _log
        self._value: A2AConfig | None = None
        self._raw: tuple[str | None, ...] | None = None
        self._loaded_at = 0.0

    def get(self) -> A2AConfig:
        now = self._clock()
        if self._value is not None and now - self._loaded_at < self._ttl:
            return self._value
        return self._reload(now)

    def _read_raw(self) -> tuple[str | None, ...]:
        try:
            values = read_env_file(self._env_file)
        except ConfigError as exc:
            # A half-written or unreadable file must not stop the fleet: keys unset.
            self._log.warning("a2a config unreadable", path=str(self._env_file), error=str(exc))
            values = {}
        environ = os.environ if self._environ is None else self._environ
        for key in self.KEYS:
            if key in environ:
                values[key] = environ[key]
        return tuple(values.get(key) for key in self.KEYS)

    def _reload(self, now: float) -> A2AConfig:
        raw = self._read_raw()
        self._loaded_at = now
        if self._value is not None and raw == self._raw:
            return self._value
        # Parse (and warn about a malformed value) only when the text changed, not every TTL.
        rooms_raw, hops_raw = raw
        value = A2AConfig(parse_rooms(rooms_raw), parse_max_hops(hops_raw, self._log))
        if self._value is not None and value != self._value:
            self._log.info("a2a config reloaded", rooms=len(value.rooms), max_hops=value.max_hops)
        self._raw, self._value = raw, value
        return value
