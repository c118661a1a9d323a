"""A small OTLP/HTTP trace receiver on 127.0.0.1: what a collector would be handed, decoded.

It accepts `POST /v1/traces` with the protobuf body the OpenTelemetry exporter sends and keeps
every span with the `service.instance.id` of the process that sent it (burstbot's owner name),
so a test can tell which process made which span of a trace.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from testkit.serving import serve_locally


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    instance: str  # the sending process's `service.instance.id`
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner, self.port = await serve_locally(app, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            instance = str(resource.get("service.instance.id", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), instance,
                        {a.key: _value(a.value) for a in span.attributes},
                    ))  # fmt: skip
        self._arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def wait_for(self, condition: Any, within: float = 20.0) -> None:
        """Until `condition(spans)` holds (bounded: a TimeoutError names what never came)."""

        async def met() -> None:
            while not condition(self.spans):
                self._arrived.clear()
                await self._arrived.wait()

        await asyncio.wait_for(met(), within)
