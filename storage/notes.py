"""What front ends note about a conversation (`bot.core.notes.NoteBook`), over the shared SQL.

A note is one named value per conversation, kept apart from the conversation row: it may be
written before the conversation has a message (Slack's assistant thread opens empty). `add_note`
is one conditional insert, so of two deliveries of one event exactly one gets True.
"""

from __future__ import annotations

from storage.seam import Conn, StoreSeam


class NoteSteps(StoreSeam[Conn]):
    async def note(self, conversation_id: str, name: str) -> str | None:
        row = await self._one("note", {"cid": conversation_id, "name": name})
        return None if row is None else str(row[0])

    async def put_note(self, conversation_id: str, name: str, value: str, now: float) -> None:
        params = {"cid": conversation_id, "name": name, "value": value, "now": now}
        await self._rows("put_note", params)

    async def add_note(self, conversation_id: str, name: str, value: str, now: float) -> bool:
        params = {"cid": conversation_id, "name": name, "value": value, "now": now}
        return await self._one("add_note", params) is not None
