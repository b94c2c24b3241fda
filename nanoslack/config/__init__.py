"""Configuration (docs/configuration.md), by job: ``settings`` reads the keys once at start,
``a2a`` re-reads the two A2A keys while the fleet runs, ``tools`` the keys of agents
with tools, ``values`` holds the parsers
they share; tokens are wrapped in ``nanoslack.secret.Secret``. Import from here."""

from nanoslack.config.a2a import (
    DEFAULT_A2A_TTL,
    DEFAULT_MAX_HOPS,
    A2AConfig,
    A2AConfigSource,
    parse_max_hops,
    parse_rooms,
)
from nanoslack.config.settings import (
    DEFAULT_API_URL,
    DEFAULT_DB,
    DEFAULT_INSTANCE,
    DEFAULT_TEAMMATES,
    HOP_SCOPES,
    INSTANCE_NAME_RE,
    LOG_FORMATS,
    LOG_LEVELS,
    USER_ID_RE,
    HopScope,
    InstanceSettings,
    LogFormat,
    Settings,
    app_token_key,
    bot_token_key,
    configured_instances,
    database_url,
    env_suffix,
    instance_key,
    load_settings,
    teammates_dir,
)
from nanoslack.config.tools import ToolSettings
from nanoslack.config.values import ConfigError, read_env_file, split_list
from nanoslack.secret import Secret

__all__ = [
    "DEFAULT_A2A_TTL",
    "DEFAULT_API_URL",
    "DEFAULT_DB",
    "DEFAULT_INSTANCE",
    "DEFAULT_MAX_HOPS",
    "DEFAULT_TEAMMATES",
    "HOP_SCOPES",
    "INSTANCE_NAME_RE",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "USER_ID_RE",
    "A2AConfig",
    "A2AConfigSource",
    "ConfigError",
    "ToolSettings",
    "HopScope",
    "InstanceSettings",
    "LogFormat",
    "Secret",
    "Settings",
    "app_token_key",
    "bot_token_key",
    "configured_instances",
    "database_url",
    "env_suffix",
    "instance_key",
    "load_settings",
    "parse_max_hops",
    "parse_rooms",
    "read_env_file",
    "split_list",
    "teammates_dir",
]
