"""Wake-up hints: another process armed a timer, queued a reply, released leases or decided a
stop.

A store that can tell (PostgreSQL's LISTEN/NOTIFY) hands each hint's payload to `wanted`; the
engine looks now, before its next poll, only when the hint matters to this process. Polling stays
the guarantee: a hint lost changes when, never whether. A stop's hint names its conversation
(`stopped_conversation`): a watch over it here reads the store now instead of at its next poll,
so a Stop pressed on another process closes the stream here within a round trip.
"""

from __future__ import annotations

from collections.abc import Collection


def wanted(payload: str, sleeping_until: float, platforms: Collection[str]) -> bool:
    """`timer <due_at>`: sooner than the engine sleeps; `outbox <platform>`: one we serve;
    `released` (or anything else): always."""
    kind, _, detail = payload.partition(" ")
    if kind == "timer":
        try:
            return float(detail) < sleeping_until
        except ValueError:
            return False
    if kind == "outbox":
        return detail in platforms
    return True  # `released`, and a stop (its burst's timer is due now)


def stopped_conversation(payload: str) -> str | None:
    """`stop <conversation id>`: the conversation another process decided a stop for."""
    kind, _, detail = payload.partition(" ")
    return detail if kind == "stop" and detail else None
