"""Tool calls as durable actions (G14): recorded before they run, their results when they return.

Rules the store keeps (`ActionLog`):

- `begin_action` records a call in one conditional insert, fenced by the lease token like a
  reply: a worker whose lease was taken records nothing (None). A call is keyed by its
  idempotency key, derived from the burst (its conversation and first unanswered version) and
  the call (server, tool, arguments): a key already recorded, by any generation of the burst,
  inserts nothing and returns the existing record (`created` False).
- `finish_action` writes a result once (a record with a result is never changed).
- A record without a result is a call whose outcome is unknown (the process died, or the call
  was cut off): it is reported as "may have run", never silently made again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

ActionState = Literal["done", "failed", "unknown"]


@dataclass(frozen=True, slots=True)
class NewAction:
    conversation_id: str
    lease_token: int
    from_version: int  # the burst: the answered version its prompts are built on
    to_version: int  # the generation's snapshot V: the messages it had seen
    idempotency_key: str
    server: str
    tool: str
    arguments: str  # JSON, as the model asked
    read_only: bool
    tool_use_id: str
    user_id: str  # the burst's person (for `forget --user`)
    started_at: float


@dataclass(frozen=True, slots=True)
class ActionRecord:
    conversation_id: str
    idempotency_key: str
    from_version: int
    to_version: int
    lease_token: int
    server: str
    tool: str
    arguments: str
    read_only: bool
    tool_use_id: str
    started_at: float
    finished_at: float | None
    result: str | None
    failed: bool
    approval: str | None = None  # None: no approval needed (bot/core/approvals.py)
    approval_expires_at: float | None = None  # the database's clock
    decided_by: str | None = None
    asked_by: str | None = None
    card_reply_id: int | None = None

    @property
    def state(self) -> ActionState:
        if self.finished_at is None:
            return "unknown"
        return "failed" if self.failed else "done"

    @property
    def duration(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


@dataclass(frozen=True, slots=True)
class Began:
    record: ActionRecord
    created: bool  # False: the burst already had this call (the record is the earlier one)


@runtime_checkable
class ActionLog(Protocol):
    async def begin_action(self, action: NewAction) -> Began | None:
        """Record the call before it runs; None when the lease token no longer fences."""
        ...

    async def finish_action(
        self, conversation_id: str, idempotency_key: str, result: str, failed: bool, now: float
    ) -> bool:
        """Record the call's result, once; False if it already had one."""
        ...

    async def actions(
        self, conversation_id: str, from_version: int | None = None
    ) -> list[ActionRecord]:
        """The conversation's actions in the order they began (one burst's with `from_version`)."""
        ...

    async def action(self, conversation_id: str, idempotency_key: str) -> ActionRecord | None:
        """One action by its key, as stored now."""
        ...


def canonical_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(
    conversation_id: str, from_version: int, server: str, tool: str, arguments: str
) -> str:
    """The same call in the same burst has the same key, whichever generation makes it."""
    material = "\x1f".join([conversation_id, str(from_version), server, tool, arguments])
    return "bb-" + hashlib.sha256(material.encode()).hexdigest()[:32]
