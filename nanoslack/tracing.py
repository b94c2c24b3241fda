"""Traces (docs/operations.md "Traces"): with the standard OpenTelemetry variables set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, read from the
environment or ``.env``), each turn is a trace exported over OTLP/HTTP (protobuf):

- a ``turn`` span (``nanoslack.instance``, ``nanoslack.conversation``, ``nanoslack.thread``,
  ``nanoslack.trigger`` person/bot/handoff/routine, ``nanoslack.turn.status``);
- under it one span per model call, as the GenAI semantic conventions name them
  (``chat <model>``: ``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.usage.cache_read.input_tokens``) and one per
  tool call (``execute_tool <name>``: ``gen_ai.tool.name``).

A handoff carries its tool call's context as a W3C ``traceparent`` (``tools.host.Handoff``,
kept in ``handoffs.traceparent`` with the recipient's message), and the recipient's turn,
in whichever process holds it, continues that trace: a chain across bots and hosts is
one trace. Anything else that runs a turn for another (an asked teammate) passes
``traceparent()`` of the asking turn as ``turn(parent=…)``.

Off and free when not configured: no SDK is imported, and every hook below is one check
of a module global that returns a shared do-nothing span.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from nanoslack.logs import get_logger

log = get_logger(__name__)

Lookup = Callable[[str], str | None]

ENDPOINT_KEYS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE = "nanoslack"
# OpenTelemetry's own default is 5 s between exports; a turn is seconds long, so the
# operator sees it about when it ends.
DEFAULT_EXPORT_DELAY_MS = 1000


class OffSpan:
    """The span of every hook while traces are off: does nothing, costs one call."""

    __slots__ = ()

    def __enter__(self) -> OffSpan:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def set(self, _attributes: dict[str, object]) -> None:
        return None


OFF = OffSpan()


class Span:
    """One span, current for its ``with`` block (an exception leaving it marks it failed);
    ``set`` adds attributes (None values are left out)."""

    __slots__ = ("_cm", "_span")

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._span: Any = None

    def __enter__(self) -> Span:
        self._span = self._cm.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._cm.__exit__(kind, exc, tb)

    def set(self, attributes: dict[str, object]) -> None:
        for key, value in attributes.items():
            if value is not None:
                self._span.set_attribute(key, value)


class _Tracing:
    """The process's exporter while traces are on (one per process, shared by fleets)."""

    def __init__(self, tracer: Any, provider: Any, endpoint: str) -> None:
        self.tracer = tracer
        self.provider = provider
        self.endpoint = endpoint
        self.users = 1


_on: _Tracing | None = None
_lock = threading.Lock()


def enabled() -> bool:
    return _on is not None


def configure(lookup: Lookup) -> bool:
    """Turn traces on when an OTLP endpoint is configured (and ``OTEL_SDK_DISABLED`` is not
    true, ``OTEL_TRACES_EXPORTER`` not ``none``); True when they are on. Each call is
    paired with ``shutdown``."""
    global _on
    endpoint = _endpoint(lookup)
    if endpoint is None:
        return False
    with _lock:
        if _on is not None:
            _on.users += 1
            return True
        _on = _start(lookup, endpoint)
    log.info("traces exported", endpoint=endpoint, protocol="http/protobuf")
    return True


def shutdown() -> None:
    """Export what is left and stop (the last user of the exporter)."""
    global _on
    with _lock:
        if _on is None:
            return
        _on.users -= 1
        if _on.users > 0:
            return
        done, _on = _on, None
    done.provider.shutdown()  # flushes the spans not yet exported


def _endpoint(lookup: Lookup) -> str | None:
    if (lookup("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return None
    if (lookup("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() == "none":
        return None
    traces, base = ((lookup(key) or "").strip() for key in ENDPOINT_KEYS)
    if traces:
        return traces
    return base.rstrip("/") + "/v1/traces" if base else None


def _start(lookup: Lookup, endpoint: str) -> _Tracing:
    # Imported only here: a fleet without traces never loads the SDK.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = (lookup("OTEL_SERVICE_NAME") or "").strip() or DEFAULT_SERVICE
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=endpoint, headers=_headers(lookup))
    delay = _int(lookup("OTEL_BSP_SCHEDULE_DELAY"), DEFAULT_EXPORT_DELAY_MS)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay))
    return _Tracing(provider.get_tracer("nanoslack"), provider, endpoint)


def _headers(lookup: Lookup) -> dict[str, str] | None:
    raw = (lookup("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or lookup("OTEL_EXPORTER_OTLP_HEADERS") or "").strip()
    if not raw:
        return None
    pairs = (item.partition("=") for item in raw.split(",") if "=" in item)
    return {key.strip(): value.strip() for key, _, value in pairs}


def _int(raw: str | None, default: int) -> int:
    text = (raw or "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else default


# -- the hooks ------------------------------------------------------------------------------


def turn(
    *, instance: str, conversation: str, thread: str, trigger: str, parent: str | None = None
) -> Span | OffSpan:
    """The ``turn`` span of one turn, current in its ``with`` block: the model and tool
    calls under it are its children. ``parent``: a ``traceparent`` the turn continues (a
    handoff's, an asking turn's)."""
    on = _on
    if on is None:
        return OFF
    attributes = {
        "nanoslack.instance": instance,
        "nanoslack.conversation": conversation,
        "nanoslack.thread": thread,
        "nanoslack.trigger": trigger,
    }
    return Span(on.tracer.start_as_current_span("turn", context=_context(parent), attributes=attributes))


def turn_status(status: str) -> None:
    """How the current turn ended (done, silent, failed, budget, halted)."""
    if _on is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attribute("nanoslack.turn.status", status)


def model_call(model: str, provider: str) -> Span | OffSpan:
    """One model call of the current turn (GenAI semantic conventions)."""
    on = _on
    if on is None:
        return OFF
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    return Span(on.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes))


def tool_call(name: str) -> Span | OffSpan:
    """One tool call of the current turn (GenAI semantic conventions)."""
    on = _on
    if on is None:
        return OFF
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    return Span(on.tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes))


def traceparent() -> str | None:
    """The current span's context as W3C ``traceparent`` (None while traces are off or no
    span is current): what a handoff carries to the turn it wakes."""
    if _on is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def _context(parent: str | None) -> Any:
    if not parent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": parent})
