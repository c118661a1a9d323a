"""A burst's W3C trace context (`traceparent`), chosen by the store when the burst opens.

The store keeps it on the conversation from the burst's first message until the burst is
answered, so whichever process generates, commits or takes the burst over joins one trace
(`bot/ops/traces.py` turns it into spans). It is only two random ids: nothing here needs the
OpenTelemetry packages, and a bot without telemetry just stores a string it never reads.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def new_trace_context() -> str:
    """A fresh `traceparent`: a random trace id and the span id of the burst's root span."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


@dataclass(frozen=True, slots=True)
class TraceIds:
    trace_id: int
    span_id: int


def parse_trace_context(value: object) -> TraceIds | None:
    """The ids of a stored `traceparent`; None for anything else (an old row has none)."""
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    return TraceIds(trace_id, span_id) if trace_id and span_id else None
