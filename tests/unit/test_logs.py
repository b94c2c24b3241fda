from __future__ import annotations

import io
import json
import logging

import pytest
import structlog
from structlog.testing import capture_logs
from structlog.typing import EventDict, WrappedLogger

from nanoslack.config import Secret
from nanoslack.logs import configure_logging, get_logger, redact_processor, redact_text, reset_loggers

BOT = "xoxb-1234-5678-AbCdEfGh"
APP = "xapp-1-A0APP-99-deadbeef"

pytestmark = pytest.mark.usefixtures("restore_logging")


def configured(level: str = "info", fmt: str = "console") -> io.StringIO:
    out = io.StringIO()
    configure_logging(level, fmt, stream=out)
    return out


def test_token_in_an_event_field_is_redacted_keeping_the_prefix() -> None:
    out = configured()
    get_logger("t").info("connecting", token=BOT, nested={"headers": [f"Bearer {APP}"]})
    line = out.getvalue()
    assert BOT not in line and APP not in line
    assert "xoxb-***" in line and "xapp-***" in line


def test_token_in_the_event_name_is_redacted() -> None:
    out = configured()
    get_logger("t").warning(f"auth failed for {BOT}")
    assert BOT not in out.getvalue() and "auth failed for xoxb-***" in out.getvalue()


def test_token_in_a_stdlib_slack_sdk_message_is_redacted() -> None:
    out = configured()
    logging.getLogger("slack_sdk.socket_mode").warning("Failed to connect (token: %s)", APP)
    assert APP not in out.getvalue() and "xapp-***" in out.getvalue()


def test_token_in_an_objects_repr_or_a_traceback_is_redacted() -> None:
    class Leaky:
        def __repr__(self) -> str:
            return f"Leaky({BOT})"

    out = configured()
    log = get_logger("t")
    log.info("object", thing=Leaky())
    try:
        raise RuntimeError(f"bad token {BOT}")
    except RuntimeError:
        log.exception("boom")
    assert BOT not in out.getvalue()


def test_secret_fields_render_masked() -> None:
    out = configured()
    get_logger("t").info("instance", bot_token=Secret(BOT))
    assert BOT not in out.getvalue() and "xoxb-***" in out.getvalue()


def test_json_format_writes_one_object_per_line_with_iso_timestamp() -> None:
    out = configured(fmt="json")
    get_logger("t").info("bot message admitted", sender="slack:bot:B0", token=BOT)
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["event"] == "bot message admitted" and record["sender"] == "slack:bot:B0"
    assert record["token"] == "xoxb-***" and record["level"] == "info"
    assert "T" in record["timestamp"]


def test_console_format_is_one_line_with_key_value_fields_and_no_colours() -> None:
    out = configured()
    get_logger("t").info("bot message dropped", reason="room not in SLACK_A2A_ROOMS", hop=3)
    (line,) = out.getvalue().splitlines()
    assert "bot message dropped" in line and "hop=3" in line and "\x1b[" not in line


def test_configuring_twice_writes_each_event_once() -> None:
    configured()
    out = configured()
    get_logger("t").info("once")
    assert out.getvalue().count("once") == 1


def test_level_filters_our_events() -> None:
    out = configured("warning")
    log = get_logger("t")
    log.info("quiet")
    log.warning("loud")
    assert "quiet" not in out.getvalue() and "loud" in out.getvalue()


def test_slack_libraries_are_quiet_below_warning_unless_debug() -> None:
    out = configured("info")
    logging.getLogger("slack_bolt.App").info("listener matched")
    assert "listener matched" not in out.getvalue()
    out = configured("debug")
    logging.getLogger("slack_bolt.App").debug("listener matched")
    assert "listener matched" in out.getvalue()


def test_redaction_processor_masks_values_for_captured_logs_too() -> None:
    with capture_logs(processors=[redact_processor]) as logs:
        get_logger("t").info(f"hello {BOT}", items=(BOT, {"k": [APP]}), secret=Secret(APP))
    assert logs[0]["event"] == "hello xoxb-***"
    assert logs[0]["items"] == ("xoxb-***", {"k": ["xapp-***"]})
    assert logs[0]["secret"] == "<secret xapp-***>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("xoxp-1-2-3", "xoxp-***"),
        ("a=xoxe-abc-DEF,b", "a=xoxe-***,b"),
        ("plain text, xox alone", "plain text, xox alone"),
    ],
)
def test_redact_text_covers_slack_token_shapes(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_logger_made_before_configuring_follows_each_later_configuration() -> None:
    log = get_logger("early")  # as a module's logger, made at import
    log.info("before any configuration")  # assembled from structlog's defaults
    quiet = configured("warning")
    log.info("discarded")
    log.warning("kept", n=1)
    loud = configured("debug")
    log.debug("now kept", n=2)
    assert "discarded" not in quiet.getvalue() and "kept" in quiet.getvalue()
    assert "now kept" in loud.getvalue() and "n=2" in loud.getvalue()
    assert "now kept" not in quiet.getvalue()


def test_captured_logs_reach_a_logger_already_assembled() -> None:
    configured("info")
    log = get_logger("assembled")
    log.info("first")  # assembled now, outside the capture
    with capture_logs() as entries:
        log.info("captured", room="C1")
    assert [e["event"] for e in entries] == ["captured"]
    assert entries[0]["room"] == "C1"


def test_reset_loggers_takes_up_structlog_configured_directly() -> None:
    out = configured("info")
    log = get_logger("direct")
    log.info("through configure_logging")
    seen: list[str] = []

    def keep(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        seen.append(str(event_dict["event"]))
        raise structlog.DropEvent

    structlog.configure(processors=[keep])
    reset_loggers()
    log.info("through structlog")
    assert seen == ["through structlog"]
    assert "through structlog" not in out.getvalue()
