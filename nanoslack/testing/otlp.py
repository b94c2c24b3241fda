"""A small OTLP/HTTP trace receiver for tests, on 127.0.0.1: what a collector would get from
the fleet's exporter (``nanoslack.tracing``), each export request decoded with the
message classes ``opentelemetry-proto`` ships. Usable from an in-process fleet and from a
``nanoslack run`` subprocess alike: point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``url``.

    async with OtlpReceiver() as otlp:
        ... OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url ...
        turn = await otlp.wait_for(lambda spans: [s for s in spans if s.name == "turn"])
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from nanoslack.testing.ports import serve

HOST = "127.0.0.1"
PATH = "/v1/traces"
T = TypeVar("T")


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as W3C traceparent writes it
    span_id: str
    parent_span_id: str  # "" for a root span
    service: str  # the exporting process's service.name
    attributes: dict[str, Any]


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The base endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``): exports go to ``url/v1/traces``."""
        return f"http://{HOST}:{self.port}"

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.requests += 1
        self.spans.extend(_spans(ExportTraceServiceRequest.FromString(body)))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def wait_for(self, found: Callable[[list[ReceivedSpan]], T], within: float = 15) -> T:
        """``found(spans)`` once it is truthy; AssertionError past ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            result = found(list(self.spans))
            if result:
                return result
            if time.monotonic() > deadline:
                names = sorted({s.name for s in self.spans})
                raise AssertionError(f"spans not received within {within}s; got {names}")
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post(PATH, self._export)
        self._runner, self.port = await serve(app, HOST)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        service=str(resource.get("service.name", "")),
                        attributes=_attributes(span.attributes),
                    )
                )
    return spans


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
