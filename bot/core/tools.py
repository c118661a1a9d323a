"""Client tools (MCP servers) as the replier sees them: what a tool is, what a call gave, and the
servers that make calls. Neutral: `bot/tool_servers.py` is the one implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

IDEMPOTENCY_ARGUMENTS = ("idempotency_key", "idempotencyKey")
"""An argument a tool declares under one of these names receives our idempotency key."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    server: str
    name: str  # the server's own name for the tool
    description: str
    input_schema: dict[str, Any]
    read_only: bool  # the server's `readOnlyHint`; absent means the tool may have an effect
    idempotency_argument: str | None = None
    asks: bool = False  # `approve = "ask"`: a call waits for a person (bot/core/approvals.py)

    def shown_schema(self) -> dict[str, Any]:
        """The input schema the model sees: our idempotency key is ours to fill in."""
        if self.idempotency_argument is None:
            return self.input_schema
        schema = dict(self.input_schema)
        properties = dict(schema.get("properties") or {})
        properties.pop(self.idempotency_argument, None)
        schema["properties"] = properties
        required = [r for r in schema.get("required") or [] if r != self.idempotency_argument]
        schema["required"] = required
        return schema


def idempotency_argument(input_schema: dict[str, Any]) -> str | None:
    properties = input_schema.get("properties") or {}
    return next((name for name in IDEMPOTENCY_ARGUMENTS if name in properties), None)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a call gave: the server answered (`failed` if the tool reported an error)."""

    text: str
    failed: bool = False


class ToolUnavailable(Exception):
    """The server could not be asked: nothing was sent, the call did not run."""


class OutcomeUnknown(Exception):
    """The call was sent but no answer came (the connection broke, the call timed out): it may
    have run."""


class ToolServers(Protocol):
    def tools(self, servers: Sequence[str]) -> tuple[list[ToolSpec], list[str]]:
        """The allowed tools of the servers that are up, and the names of those that are down."""
        ...

    async def call(
        self, spec: ToolSpec, arguments: dict[str, Any], idempotency_key: str
    ) -> ToolOutput:
        """Make the call; raises `ToolUnavailable` or `OutcomeUnknown`."""
        ...
