"""Notes a front end keeps about a conversation: small named values in the store.

Slack's assistant threads use them for what the platform tells once and a reply needs later (the
channel the person is viewing) and for what must happen once per thread (suggested prompts on
opening, the title). `add_note` is the "once": of two deliveries of one event, one gets True;
`swap_note` is the "who moves it on": of two processes that read the same value and each replace
it, one gets True (the agent view's latest exchange, adapters/slack/agent_view.py).
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

    async def noted(self, name: str, under: str) -> list[str]:
        """The conversations whose id starts with `under` that carry the note `name`, most
        recently noted first (Slack's catch-up lists the workspace's agent DMs)."""
        ...

    async def swap_note(
        self, conversation_id: str, name: str, expected: str | None, value: str, now: float
    ) -> bool:
        """Set the note to `value` only if it still holds `expected` (None: only if it does not
        exist); True only for the call that set it."""
        ...
