from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nanoslack.config import (
    A2AConfig,
    A2AConfigSource,
    ConfigError,
    Secret,
    app_token_key,
    bot_token_key,
    env_suffix,
    load_settings,
    parse_max_hops,
    parse_rooms,
)

TOKENS = {"SLACK_BOT_TOKEN": "xoxb-1-default", "SLACK_APP_TOKEN": "xapp-1-default"}


def write_env(path: Path, **values: str) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def warnings_for(logs: list[MutableMapping[str, Any]], key: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["log_level"] == "warning" and e.get("key") == key]


# -- <SUF> and secrets -------------------------------------------------------------------------


def test_suffix_upper_cases_and_turns_dashes_into_underscores() -> None:
    assert env_suffix("gh-bot") == "GH_BOT"
    assert bot_token_key("gh-bot") == "SLACK_BOT_TOKEN_GH_BOT"
    assert app_token_key("eli_2") == "SLACK_APP_TOKEN_ELI_2"


def test_default_instance_uses_the_bare_keys() -> None:
    assert bot_token_key("default") == "SLACK_BOT_TOKEN"
    assert app_token_key("default") == "SLACK_APP_TOKEN"


def test_secret_never_shows_its_value() -> None:
    s = Secret("xoxb-123-456-abcdef")
    assert repr(s) == "<secret xoxb-***>"
    assert str(s) == f"{s}" == "<secret xoxb-***>"
    assert "abcdef" not in repr([s, {"t": s}])
    assert repr(Secret("hunter2")) == "<secret ***>"


def test_secret_reveals_compares_by_value_and_is_falsy_when_empty() -> None:
    s = Secret("xapp-1-A-2")
    assert s.reveal() == "xapp-1-A-2"
    assert s == Secret("xapp-1-A-2") and s != Secret("xapp-other")
    assert hash(s) == hash(Secret("xapp-1-A-2"))
    assert s and not Secret("")


# -- instances -----------------------------------------------------------------------------------


def test_instances_are_default_plus_the_listed_names_with_their_suffixed_tokens(tmp_path: Path) -> None:
    environ = {
        **TOKENS,
        "SLACK_INSTANCES": " gh-bot , eli,,gh-bot ",
        "SLACK_BOT_TOKEN_GH_BOT": "xoxb-2-gh",
        "SLACK_APP_TOKEN_GH_BOT": "xapp-2-gh",
        "SLACK_BOT_TOKEN_ELI": "xoxb-3-eli",
        "SLACK_APP_TOKEN_ELI": "xapp-3-eli",
    }
    settings = load_settings(tmp_path / ".env", environ)
    assert settings.instance_names == ("default", "gh-bot", "eli")
    gh = settings.instance("gh-bot")
    assert gh is not None and gh.bot_token.reveal() == "xoxb-2-gh" and gh.app_token.reveal() == "xapp-2-gh"
    assert settings.skipped == ()


def test_default_is_not_registered_without_slack_bot_token(tmp_path: Path) -> None:
    environ = {"SLACK_INSTANCES": "eli", "SLACK_BOT_TOKEN_ELI": "xoxb-e", "SLACK_APP_TOKEN_ELI": "xapp-e"}
    assert load_settings(tmp_path / ".env", environ).instance_names == ("eli",)


def test_missing_token_skips_only_that_instance_with_the_log_line(tmp_path: Path) -> None:
    environ = {
        **TOKENS,
        "SLACK_INSTANCES": "eli,gh-bot",
        "SLACK_BOT_TOKEN_ELI": "xoxb-e",
        "SLACK_BOT_TOKEN_GH_BOT": "xoxb-g",
        "SLACK_APP_TOKEN_GH_BOT": "xapp-g",
    }
    with capture_logs() as logs:
        settings = load_settings(tmp_path / ".env", environ)
    assert settings.instance_names == ("default", "gh-bot")
    assert settings.skipped == (("eli", "SLACK_APP_TOKEN_ELI"),)
    skipped = [e for e in logs if e["event"] == "instance skipped: credentials missing"]
    assert skipped == [
        {
            "event": "instance skipped: credentials missing",
            "instance": "eli",
            "key": "SLACK_APP_TOKEN_ELI",
            "log_level": "warning",
        }
    ]


def test_invalid_instance_name_is_skipped_with_a_warning_naming_the_key(tmp_path: Path) -> None:
    environ = {"SLACK_INSTANCES": "Eli,ok", "SLACK_BOT_TOKEN_OK": "xoxb-o", "SLACK_APP_TOKEN_OK": "xapp-o"}
    with capture_logs() as logs:
        settings = load_settings(tmp_path / ".env", environ)
    assert settings.instance_names == ("ok",)
    (warning,) = warnings_for(logs, "SLACK_INSTANCES")
    assert warning["value"] == "Eli" and "[a-z0-9_-]+" in str(warning["expected"])


# -- sources and precedence ----------------------------------------------------------------------


def test_environment_takes_precedence_over_env_file(tmp_path: Path) -> None:
    env_file = write_env(tmp_path / ".env", SLACK_BOT_TOKEN="xoxb-from-file", SLACK_APP_TOKEN="xapp-file")
    settings = load_settings(env_file, {"SLACK_BOT_TOKEN": "xoxb-from-env"})
    default = settings.instance("default")
    assert default is not None
    assert default.bot_token.reveal() == "xoxb-from-env"
    assert default.app_token.reveal() == "xapp-file"


def test_loading_never_mutates_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NANOSLACK_TEST_ONLY_KEY", raising=False)
    env_file = write_env(tmp_path / ".env", NANOSLACK_TEST_ONLY_KEY="x")
    settings = load_settings(env_file)
    assert settings.value("NANOSLACK_TEST_ONLY_KEY") == "x"
    import os

    assert "NANOSLACK_TEST_ONLY_KEY" not in os.environ


def test_env_file_defaults_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / ".env", SLACK_A2A_ROOMS="G0A")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings.env_file == (tmp_path / ".env").resolve()
    assert settings.a2a.rooms == {"G0A"}


def test_max_turns_takes_a_positive_integer_and_warns_on_anything_else(tmp_path: Path) -> None:
    assert load_settings(tmp_path / ".env", {}).max_turns == 8
    assert load_settings(tmp_path / ".env", {"NANOSLACK_MAX_TURNS": "3"}).max_turns == 3
    with capture_logs() as logs:
        assert load_settings(tmp_path / ".env", {"NANOSLACK_MAX_TURNS": "lots"}).max_turns == 8
    assert any(e.get("key") == "NANOSLACK_MAX_TURNS" for e in logs)


# -- values and defaults -------------------------------------------------------------------------


def test_defaults_apply_when_nothing_is_set(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / ".env", {})
    assert settings.instances == () and settings.skipped == ()
    assert settings.api_url == "https://slack.com/api/"
    assert settings.db_url == "sqlite:///" + str((tmp_path / "data" / "nanoslack.db").resolve())
    assert settings.hop_scope == "identity" and settings.a2a_ttl == 30.0
    assert (settings.log_level, settings.log_format) == ("info", "console")
    assert settings.teammates_dir == (tmp_path / "teammates").resolve()
    assert settings.owners == ()


def test_api_url_always_ends_with_a_slash(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / ".env", {"SLACK_API_URL": "http://127.0.0.1:8080/api"})
    assert settings.api_url == "http://127.0.0.1:8080/api/"


def test_database_url_overrides_nanoslack_db(tmp_path: Path) -> None:
    environ = {"DATABASE_URL": "postgresql://h/db", "NANOSLACK_DB": "x.db"}
    assert load_settings(tmp_path / ".env", environ).db_url == "postgresql://h/db"


def test_nanoslack_db_is_resolved_against_the_env_files_folder(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "conf" / ".env", {"NANOSLACK_DB": "state/n.db"})
    assert settings.db_url == "sqlite:///" + str((tmp_path / "conf" / "state" / "n.db").resolve())


def test_owners_are_a_trimmed_comma_list(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / ".env", {"SLACK_OWNER": " U01 ,W02,,U01"})
    assert settings.owners == ("U01", "W02")


@pytest.mark.parametrize(
    ("key", "value", "field", "default"),
    [
        ("SLACK_A2A_HOP_SCOPE", "fleet", "hop_scope", "identity"),
        ("SLACK_A2A_CONFIG_TTL", "soon", "a2a_ttl", 30.0),
        ("SLACK_A2A_CONFIG_TTL", "-1", "a2a_ttl", 30.0),
        ("LOG_FORMAT", "xml", "log_format", "console"),
        ("LOG_LEVEL", "loud", "log_level", "info"),
        ("NANOSLACK_EVENT_LOOP", "trio", "event_loop", "uvloop"),
    ],
)
def test_malformed_value_warns_naming_key_value_and_expectation_and_applies_the_default(
    tmp_path: Path, key: str, value: str, field: str, default: object
) -> None:
    with capture_logs() as logs:
        settings = load_settings(tmp_path / ".env", {key: value})
    assert getattr(settings, field) == default
    (warning,) = warnings_for(logs, key)
    assert key in str(warning["event"])
    assert warning["value"] == value and warning["expected"] and warning["using"] == default


def test_well_formed_values_are_used(tmp_path: Path) -> None:
    environ = {
        "SLACK_A2A_HOP_SCOPE": "room",
        "SLACK_A2A_CONFIG_TTL": "0.5",
        "LOG_LEVEL": "DEBUG",
        "LOG_FORMAT": "json",
    }
    settings = load_settings(tmp_path / ".env", environ)
    assert (settings.hop_scope, settings.a2a_ttl, settings.log_level, settings.log_format) == (
        "room",
        0.5,
        "debug",
        "json",
    )


def test_unusable_api_url_raises_config_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SLACK_API_URL"):
        load_settings(tmp_path / ".env", {"SLACK_API_URL": "slack.com/api"})


def test_settings_repr_shows_no_token(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / ".env", {**TOKENS, "OPENAI_API_KEY": "sk-very-secret"})
    text = repr(settings)
    assert "xoxb-1-default" not in text and "xapp-1-default" not in text and "sk-very-secret" not in text


# -- the A2A keys --------------------------------------------------------------------------------


def test_a2a_rooms_are_trimmed_and_empty_items_ignored() -> None:
    assert parse_rooms(" G0A , C0B ,,") == frozenset({"G0A", "C0B"})
    assert parse_rooms(None) == frozenset() and parse_rooms("") == frozenset()


def test_max_hops_of_4_is_4() -> None:
    assert parse_max_hops("4") == 4


@pytest.mark.parametrize("value", ["0", "-2", "six"])
def test_malformed_max_hops_falls_back_to_6_with_a_warning_naming_the_key(value: str) -> None:
    with capture_logs() as logs:
        assert parse_max_hops(value) == 6
    (warning,) = warnings_for(logs, "SLACK_A2A_MAX_HOPS")
    assert "SLACK_A2A_MAX_HOPS" in str(warning["event"]) and warning["value"] == value


@pytest.mark.parametrize("value", [None, "", "  "])
def test_unset_max_hops_is_6_without_a_warning(value: str | None) -> None:
    with capture_logs() as logs:
        assert parse_max_hops(value) == 6
    assert logs == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a2a_source_rereads_env_file_only_after_the_ttl(tmp_path: Path) -> None:
    env_file = write_env(tmp_path / ".env", SLACK_A2A_ROOMS="G0A", SLACK_A2A_MAX_HOPS="3")
    clock = FakeClock()
    source = A2AConfigSource(env_file, environ={}, ttl=30, clock=clock)
    assert source.get() == A2AConfig(frozenset({"G0A"}), 3)
    write_env(env_file, SLACK_A2A_ROOMS="G0A,C0B", SLACK_A2A_MAX_HOPS="4")
    clock.now += 29.9
    assert source.get() == A2AConfig(frozenset({"G0A"}), 3)
    clock.now += 0.1
    with capture_logs() as logs:
        assert source.get() == A2AConfig(frozenset({"G0A", "C0B"}), 4)
    assert {"event": "a2a config reloaded", "rooms": 2, "max_hops": 4, "log_level": "info"} in logs


def test_a2a_source_keeps_the_environment_on_top_of_the_file(tmp_path: Path) -> None:
    env_file = write_env(tmp_path / ".env", SLACK_A2A_ROOMS="G0A", SLACK_A2A_MAX_HOPS="3")
    source = A2AConfigSource(env_file, environ={"SLACK_A2A_MAX_HOPS": "2"}, ttl=0)
    assert source.get() == A2AConfig(frozenset({"G0A"}), 2)


def test_a2a_source_treats_a_missing_env_file_as_unset_keys(tmp_path: Path) -> None:
    source = A2AConfigSource(tmp_path / "absent.env", environ={}, ttl=0)
    assert source.get() == A2AConfig(frozenset(), 6)


def test_a2a_source_does_not_repeat_a_malformed_value_warning_every_ttl(tmp_path: Path) -> None:
    env_file = write_env(tmp_path / ".env", SLACK_A2A_MAX_HOPS="six")
    clock = FakeClock()
    source = A2AConfigSource(env_file, environ={}, ttl=1, clock=clock)
    with capture_logs() as logs:
        for _ in range(3):
            assert source.get().max_hops == 6
            clock.now += 5
    assert len(warnings_for(logs, "SLACK_A2A_MAX_HOPS")) == 1


def test_settings_build_an_a2a_source_with_their_file_ttl_and_environment(tmp_path: Path) -> None:
    env_file = write_env(tmp_path / ".env", SLACK_A2A_ROOMS="G0A", SLACK_A2A_CONFIG_TTL="5")
    settings = load_settings(env_file, {"SLACK_A2A_MAX_HOPS": "2"})
    clock = FakeClock()
    source = settings.a2a_source(clock=clock)
    assert source.get() == A2AConfig(frozenset({"G0A"}), 2)
    write_env(env_file, SLACK_A2A_ROOMS="C0B")
    clock.now += 5
    assert source.get().rooms == {"C0B"}


DESIGN_KEYS = [
    "SLACK_INSTANCES",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_BOT_TOKEN_GH_BOT",
    "SLACK_APP_TOKEN_GH_BOT",
    "SLACK_API_URL",
    "SLACK_A2A_ROOMS",
    "SLACK_A2A_MAX_HOPS",
    "SLACK_A2A_HOP_SCOPE",
    "SLACK_A2A_CONFIG_TTL",
    "SLACK_OWNER",
    "NANOSLACK_DB",
    "DATABASE_URL",
    "NANOSLACK_AGENT",
    "NANOSLACK_AGENT_COMMAND",
    "NANOSLACK_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "NANOSLACK_TEAMMATES",
    "NANOSLACK_DAILY_TOKENS",
    "NANOSLACK_DAILY_USD",
    "NANOSLACK_ROOM_USD",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "NANOSLACK_MAX_STEPS",
    "NANOSLACK_A2A_ALLOW",
    "NANOSLACK_CHIEF",
    "NANOSLACK_TOOL_TIMEOUT",
    "NANOSLACK_TOOL_APPROVAL_TIMEOUT",
    "NANOSLACK_ASK_TIMEOUT",
    "NANOSLACK_ALLOW_BROADCAST",
    "NANOSLACK_WORKING_REACTION",
    "NANOSLACK_STREAM",
    "NANOSLACK_STATUS_REFRESH",
    "NANOSLACK_METRICS_ADDR",
    "NANOSLACK_SHUTDOWN_GRACE",
    "NANOSLACK_EVENT_LOOP",
    "NANOSLACK_VOTE_REMIND",
    "NANOSLACK_VOTE_CLOSE",
    "LOG_LEVEL",
    "LOG_FORMAT",
]


def test_env_example_documents_every_design_key_with_a_comment_and_no_values() -> None:
    lines = (Path(__file__).parents[2] / ".env.example").read_text().splitlines()
    for key in DESIGN_KEYS:
        (index,) = [i for i, line in enumerate(lines) if line.lstrip("# ").startswith(f"{key}=")]
        assert lines[index - 1].startswith("# "), key
        assert lines[index].split("=", 1)[1] == "", key


def test_ask_timeout_is_120_seconds_unless_set_and_warns_on_a_bad_value(tmp_path: Path) -> None:
    assert load_settings(tmp_path / ".env", {}).tools.ask_timeout == 120.0
    assert load_settings(tmp_path / ".env", {"NANOSLACK_ASK_TIMEOUT": "2.5"}).tools.ask_timeout == 2.5
    with capture_logs() as logs:
        assert load_settings(tmp_path / ".env", {"NANOSLACK_ASK_TIMEOUT": "0"}).tools.ask_timeout == 120.0
    assert any(e.get("key") == "NANOSLACK_ASK_TIMEOUT" for e in logs)


def test_dm_replies_stream_by_default_and_stream_0_turns_it_off(tmp_path: Path) -> None:
    surface = load_settings(tmp_path / ".env", {}).surface
    assert surface.stream is True and surface.status_refresh == 90.0
    off = load_settings(tmp_path / ".env", {"NANOSLACK_STREAM": "0", "NANOSLACK_STATUS_REFRESH": "0.5"})
    assert off.surface.stream is False and off.surface.status_refresh == 0.5
    with capture_logs() as logs:
        assert load_settings(tmp_path / ".env", {"NANOSLACK_STREAM": "maybe"}).surface.stream is True
    assert any(e.get("key") == "NANOSLACK_STREAM" for e in logs)


def test_post_rate_takes_a_non_negative_number_and_warns_on_anything_else(tmp_path: Path) -> None:
    assert load_settings(tmp_path / ".env", {}).post_rate == 1.0
    assert load_settings(tmp_path / ".env", {"NANOSLACK_POST_RATE": "0"}).post_rate == 0.0
    assert load_settings(tmp_path / ".env", {"NANOSLACK_POST_RATE": "2.5"}).post_rate == 2.5
    with capture_logs() as logs:
        assert load_settings(tmp_path / ".env", {"NANOSLACK_POST_RATE": "-1"}).post_rate == 1.0
    assert any(e.get("key") == "NANOSLACK_POST_RATE" for e in logs)


@pytest.mark.parametrize(
    ("raw", "addr"),
    [
        ("", None),
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:0", ("::1", 0)),
        ("host-a:80", ("host-a", 80)),
    ],
)
def test_metrics_addr_is_host_and_port_or_off(tmp_path: Path, raw: str, addr: object) -> None:
    assert load_settings(tmp_path / ".env", {"NANOSLACK_METRICS_ADDR": raw}).metrics_addr == addr


@pytest.mark.parametrize("raw", ["9464", "127.0.0.1", "127.0.0.1:99999", "http://127.0.0.1:9464", "a b:1"])
def test_a_malformed_metrics_addr_is_an_error_naming_the_key(tmp_path: Path, raw: str) -> None:
    settings = load_settings(tmp_path / ".env", {"NANOSLACK_METRICS_ADDR": raw})
    with pytest.raises(ConfigError, match="^NANOSLACK_METRICS_ADDR: expected host:port"):
        settings.metrics_addr  # noqa: B018


def test_shutdown_grace_takes_seconds_and_warns_on_anything_else(tmp_path: Path) -> None:
    assert load_settings(tmp_path / ".env", {}).shutdown_grace == 20.0
    assert load_settings(tmp_path / ".env", {"NANOSLACK_SHUTDOWN_GRACE": "0"}).shutdown_grace == 0.0
    assert load_settings(tmp_path / ".env", {"NANOSLACK_SHUTDOWN_GRACE": "2.5"}).shutdown_grace == 2.5
    with capture_logs() as logs:
        assert load_settings(tmp_path / ".env", {"NANOSLACK_SHUTDOWN_GRACE": "soon"}).shutdown_grace == 20.0
    assert any(e.get("key") == "NANOSLACK_SHUTDOWN_GRACE" for e in logs)


def test_the_file_keys_default_parse_and_warn_and_the_downloads_live_beside_the_store(tmp_path: Path) -> None:
    files = load_settings(tmp_path / ".env", {}).files
    assert (files.chars, files.max_bytes, files.fetches, files.timeout_s) == (
        20_000,
        20 * 1024 * 1024,
        4,
        30.0,
    )
    assert files.folder == (tmp_path / "data" / "files").resolve()
    environ = {
        "NANOSLACK_FILE_CHARS": "500",
        "NANOSLACK_FILE_MAX_BYTES": "1000",
        "NANOSLACK_FILE_FETCHES": "2",
        "NANOSLACK_FILE_TIMEOUT": "5",
        "NANOSLACK_DB": "state/n.db",
    }
    files = load_settings(tmp_path / ".env", environ).files
    assert (files.chars, files.max_bytes, files.fetches, files.timeout_s) == (500, 1000, 2, 5.0)
    assert files.folder == (tmp_path / "state" / "files").resolve()
    with capture_logs() as logs:
        files = load_settings(tmp_path / ".env", {"NANOSLACK_FILE_FETCHES": "many"}).files
    assert files.fetches == 4
    (warning,) = warnings_for(logs, "NANOSLACK_FILE_FETCHES")
    assert warning["value"] == "many" and warning["using"] == 4
