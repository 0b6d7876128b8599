"""An OTLP/HTTP trace receiver on loopback: what a collector would get from the app.

It serves ``POST /v1/traces`` and decodes each body with ``opentelemetry-proto``'s
``ExportTraceServiceRequest`` (protobuf, gzip or not), the way a collector does, so a
test reads the spans as they crossed the wire, not as the SDK held them. Tests wait on
:meth:`OtlpReceiver.until` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as decoded from the wire."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    """The protobuf enum: 1 INTERNAL, 2 SERVER, 3 CLIENT."""
    status_code: int
    """The protobuf enum: 0 UNSET, 1 OK, 2 ERROR."""
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[str]
    """The trace ids of the linked spans."""
    service: str
    start_ns: int = 0
    end_ns: int = 0


class OtlpReceiver:
    """Start with :meth:`start`, point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at :attr:`url`."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{int(self._runner.addresses[0][1])}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def until(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """Wait until ``done(spans)`` holds; the spans received so far."""
        async with asyncio.timeout(timeout_s):
            while not done(self.spans):
                self._changed.clear()
                await self._changed.wait()
        return self.spans

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.requests += 1
        for resource_spans in message.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(_span(s, str(service)) for s in scope_spans.spans)
        self._changed.set()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )


def _span(span: Any, service: str) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        kind=span.kind,
        status_code=span.status.code,
        attributes=_attributes(span.attributes),
        events=[(e.name, _attributes(e.attributes)) for e in span.events],
        links=[link.trace_id.hex() for link in span.links],
        service=service,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
    )


def _attributes(pairs: list[KeyValue] | Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None
