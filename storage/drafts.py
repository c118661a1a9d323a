"""The streaming draft's steps of the store (`bot.core.store.Store`), over the shared SQL.

A conversation holds at most one draft; every change to it is fenced by the lease token, and the
commit that inserts a reply hands the draft over to it (`insert_reply`, in the commit's
transaction).
"""

from __future__ import annotations

from typing import Any

from bot.core.events import Draft
from bot.core.store import OutboxRow
from storage.seam import Conn, StoreSeam


class DraftSteps(StoreSeam[Conn]):
    async def draft(self, conversation_id: str) -> Draft | None:
        row = await self._one("draft", {"cid": conversation_id})
        return None if row is None else Draft(str(row[0]), row[1], row[2] or 0.0, row[3])

    async def record_draft(self, conversation_id: str, token: int, draft: Draft) -> bool:
        params = {"cid": conversation_id, "token": token, "key": draft.key,
                  "message_id": draft.message_id, "created_at": draft.created_at,
                  "reply_to": draft.reply_to}  # fmt: skip
        return await self._one("record_draft", params) is not None

    async def drop_draft(self, conversation_id: str, token: int, key: str) -> bool:
        params = {"cid": conversation_id, "token": token, "key": key}
        return await self._one("drop_draft", params) is not None

    async def _insert_reply(self, db: Conn, params: dict[str, Any]) -> OutboxRow:
        inserted = await self._one("insert_reply", params, db)
        assert inserted is not None
        cid = params["cid"]
        handed = await self._one("hand_draft_to_reply", {"cid": cid, "id": inserted["id"]}, db)
        await self._one("clear_draft", {"cid": cid}, db)
        assert handed is not None
        return self._outbox(handed)
