"""How traces leave the process: burstbot's own tracer provider (never the process-wide one,
so libraries that trace through it, the Anthropic SDK included, stay off), and the OTLP/HTTP
exporter `[telemetry] otlp_endpoint` names. The app imports this module only then."""

from __future__ import annotations

from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from bot.ops.traces import BurstIds, Traces


def traces_through(
    processor: SpanProcessor, record_content: bool = False, instance: str = ""
) -> Traces:
    """Traces sent through `processor` (the OTLP exporter's batch, or a test's in-memory one),
    each span naming this process (`service.instance.id`: its owner name on leases)."""
    ids = BurstIds()
    resource = Resource.create({"service.name": "burstbot", "service.instance.id": instance})
    provider = TracerProvider(resource=resource, id_generator=ids)
    provider.add_span_processor(processor)
    return Traces(provider, ids, record_content)


def traces_endpoint(endpoint: str) -> str:
    """`otlp_endpoint` is the collector's base URL (like `OTEL_EXPORTER_OTLP_ENDPOINT`): traces
    go to its `/v1/traces`; a URL that already names a path is used as it is."""
    if urlsplit(endpoint).path.strip("/"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


def otlp_traces(endpoint: str, record_content: bool, instance: str) -> Traces:
    """Traces batched to an OTLP/HTTP collector (the exporter reads `OTEL_EXPORTER_OTLP_HEADERS`
    and the batch settings, `OTEL_BSP_*`, from the environment itself)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=traces_endpoint(endpoint))
    return traces_through(BatchSpanProcessor(exporter), record_content, instance)
