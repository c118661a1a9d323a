"""Notes a front end keeps about a conversation: small named values in the store.

Slack's assistant threads use them for what the platform tells once and a reply needs later (the
channel the person is viewing) and for what must happen once per thread (suggested prompts on
opening, the title). `add_note` is the "once": of two deliveries of one event, one gets True.
"""

from __future__ import annotations

from typing import Protocol


class NoteBook(Protocol):
    """The part of the store a front end is handed (the host's `notes`)."""

    async def note(self, conversation_id: str, name: str) -> str | None: ...

    async def put_note(self, conversation_id: str, name: str, value: str, now: float) -> None:
        """Set the note (replacing any value)."""
        ...

    async def add_note(self, conversation_id: str, name: str, value: str, now: float) -> bool:
        """Set the note unless it exists; True only for the call that set it."""
        ...
