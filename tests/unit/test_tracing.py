"""When traces are on (docs/operations.md "Traces"): OpenTelemetry's own variables decide."""

from __future__ import annotations

from nanoslack import tracing


def _endpoint(**env: str) -> str | None:
    return tracing._endpoint(env.get)


def test_traces_go_to_the_base_endpoints_v1_traces_or_to_the_traces_endpoint_as_given() -> None:
    assert _endpoint() is None
    assert _endpoint(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318/") == "http://c:4318/v1/traces"
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x",
    }
    assert _endpoint(**both) == "http://t/x"


def test_an_sdk_turned_off_or_an_exporter_of_none_exports_nothing() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert _endpoint(**base, OTEL_SDK_DISABLED="true") is None
    assert _endpoint(**base, OTEL_TRACES_EXPORTER="none") is None
    assert _endpoint(**base, OTEL_TRACES_EXPORTER="otlp") == "http://c:4318/v1/traces"


def test_with_traces_off_every_hook_is_the_one_shared_span_and_no_context_is_made() -> None:
    assert not tracing.enabled()
    with tracing.turn(instance="dana", conversation="C1", thread="1.0", trigger="person") as span:
        assert span is tracing.OFF
        assert tracing.model_call("gpt-4o", "openai") is tracing.OFF
        assert tracing.tool_call("send_message") is tracing.OFF
        assert tracing.traceparent() is None
        tracing.turn_status("done")
