"""The adapter contract: what an adapter may call, and what it must offer.

An adapter (Slack, Discord, console) converts platform events into `bot.core.events` types and
hands them to the `Host` (the running app: engine + store); for the way back it implements
`Frontend`. `deliver` must be idempotent by `reply.id`: asked twice for one reply (a crash
between posting and recording it), it posts once.
"""

from __future__ import annotations

from typing import Protocol

from bot.core.catch_up import ThreadBook
from bot.core.events import ConversationKey, Event, Reply
from bot.core.store import IngestResult


class Host(Protocol):
    threads: ThreadBook
    """Which threads are ours (from the store), and messages held until a lookup decides."""

    async def ingest(self, event: Event) -> IngestResult:
        """Store the event durably (milliseconds) and return; ack the platform only after this."""
        ...

    async def flush(self, key: ConversationKey) -> None:
        """No more input is coming for now: answer what is pending without waiting for quiet."""
        ...

    async def is_settled(self, key: ConversationKey) -> bool:
        """Nothing pending, generating or waiting in the outbox for this conversation."""
        ...

    def request_stop(self) -> None:
        """Ask the whole process to shut down gracefully (e.g. the console's stdin ended)."""
        ...


class Frontend(Protocol):
    platform: str

    async def start(self, host: Host) -> None:
        """Connect and start receiving in the background; return once running."""
        ...

    async def stop(self) -> None: ...

    async def deliver(self, reply: Reply) -> list[str]:
        """Post the reply; return the platform ids of what was posted (several if split).

        Call `reply.fence.check()` before posting each part (it raises `ClaimLost` once another
        worker may be delivering this reply). Raise `RetryableDeliveryError` (optionally with
        `retry_after`) or `PermanentDeliveryError`.
        """
        ...

    async def show_busy(self, key: ConversationKey, busy: bool) -> None:
        """Start or stop the thinking indicator for a conversation (best effort, never raises)."""
        ...
