"""Logging: structlog for our events, stdlib ``logging`` (slack_sdk, bolt, aiohttp) routed
through the same processors, and token redaction on everything that is written.

Redaction runs twice on purpose: as a processor (so ``capture_logs`` and any other
consumer of event dicts sees masked values) and on the final rendered line (so a
token hidden in an object's ``repr`` or a traceback still never reaches the output).
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from nanoslack.secret import Secret

TOKEN_RE = re.compile(r"(xox[a-z]|xapp)-[A-Za-z0-9-]+")
# mcp and httpx2 (the MCP client) log session ids and every request URL at info.
NOISY_LOGGERS = ("slack_sdk", "slack_bolt", "aiohttp", "websockets", "asyncio", "mcp", "httpx2")
_HANDLER_FLAG = "_nanoslack_handler"


def redact_text(text: str) -> str:
    """``xoxb-123-abc`` → ``xoxb-***``: the prefix stays so operators know which token it was."""
    if "xox" not in text and "xapp-" not in text:
        return text  # the common case: skip the regex
    return TOKEN_RE.sub(r"\1-***", text)


def redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Secret):
        return str(value)
    if isinstance(value, Mapping):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return type(value)(redact_value(v) for v in value) if not _is_namedtuple(value) else value
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace"))
    return value


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def redact_processor(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    return {key: redact_value(val) for key, val in event_dict.items()}


class _RedactingFormatter(structlog.stdlib.ProcessorFormatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_processor,
    ]


def _renderer(fmt: str, stream: TextIO) -> Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer(default=str)
    colors = bool(getattr(stream, "isatty", lambda: False)())
    return structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=structlog.dev.plain_traceback)


def _handler(level: int, fmt: str, stream: TextIO) -> logging.Handler:
    formatter = _RedactingFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact_processor,
            _renderer(fmt, stream),
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.setLevel(level)
    setattr(handler, _HANDLER_FLAG, True)
    return handler


def _level(level: str) -> int:
    value = logging.getLevelName(level.strip().upper())
    return value if isinstance(value, int) else logging.INFO


def configure_logging(level: str = "info", fmt: str = "console", stream: TextIO | None = None) -> None:
    """Set up structlog and stdlib logging; calling it again replaces the previous setup.

    ``stream`` defaults to stderr, resolved at call time so test capture works.
    """
    numeric = _level(level)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_FLAG, False)]:
        root.removeHandler(old)
    root.addHandler(_handler(numeric, fmt, stream or sys.stderr))
    root.setLevel(numeric)
    # Library chatter (socket pings, retries) drowns our events unless asked for.
    library_level = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(library_level)
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Level filtering in the wrapper: a call below the level is a no-op (~0.4 µs,
        # through ``Logger``) instead of a trip through the processor chain (~5 µs), and
        # the pipeline logs a debug line per message.
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Not cached by structlog: a later configure_logging must reach loggers created
        # at import time. ``Logger`` caches per configuration instead.
        cache_logger_on_first_use=False,
    )
    reset_loggers()


# Every ``Logger`` made: ``reset_loggers`` reaches them (weakly: a logger made for one
# line goes when it is done with). The lock: a thread may make one while another resets.
_LOGGERS: weakref.WeakSet[Logger] = weakref.WeakSet()
_LOGGERS_LOCK = threading.Lock()
_METHODS = ("debug", "info", "warning", "error", "exception", "critical", "bind")


def reset_loggers() -> None:
    """Every ``Logger`` assembles its structlog logger again at its next line: call it
    after configuring structlog other than through ``configure_logging`` (a test putting
    the previous configuration back). ``structlog.testing.capture_logs`` needs no call: it
    changes the processors' list in place, the one the assembled loggers hold."""
    with _LOGGERS_LOCK:
        loggers = list(_LOGGERS)
    for logger in loggers:
        logger.unassemble()


class Logger:
    """What ``get_logger`` gives: structlog's logger for ``name``, assembled once per
    configuration. structlog's own lazy logger, uncached, assembles a bound logger at
    every call, about 4 µs even for a line the level then discards. Here a line is a
    call of the assembled logger's own method (a discarded line: its level filter's
    no-op, ~0.4 µs), put on the instance when it is assembled; until then, and again
    after ``reset_loggers``, each method assembles first."""

    # ``bind`` gives a logger with the values on every line, for a short-lived use (one
    # connection, one turn), not for a module's logger.
    debug: Callable[..., Any]
    info: Callable[..., Any]
    warning: Callable[..., Any]
    error: Callable[..., Any]
    exception: Callable[..., Any]
    critical: Callable[..., Any]
    bind: Callable[..., Any]

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.unassemble()
        with _LOGGERS_LOCK:
            _LOGGERS.add(self)

    def unassemble(self) -> None:
        for method in _METHODS:
            setattr(self, method, functools.partial(self._assemble_and_call, method))

    def _assemble_and_call(self, method: str, *args: Any, **kw: Any) -> Any:
        proxy = structlog.stdlib.get_logger(self.name) if self.name else structlog.stdlib.get_logger()
        bound = proxy.bind()
        for name in _METHODS:
            setattr(self, name, getattr(bound, name))
        return getattr(self, method)(*args, **kw)


def get_logger(name: str | None = None) -> Logger:
    return Logger(name)
