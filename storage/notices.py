"""Notices outside any burst (`Store.queue_notice`), over the shared outbox statements.

A notice is an outbox row of kind `notice` that covers no message: its versions are the negative
`notice_slot` of the message it answers, so the outbox's key (conversation, covers_to_version)
holds, no message counts as covered and history leaves it out. It never takes over the
conversation's draft (that belongs to the pending burst).
"""

from __future__ import annotations

from bot.core.store import NewReply, OutboxRow, notice_slot
from storage import rows as codec
from storage.seam import Conn, StoreSeam


class NoticeSteps(StoreSeam[Conn]):
    async def queue_notice(
        self, conversation_id: str, text: str, reply_to_message_id: str, now: float
    ) -> OutboxRow:
        slot = notice_slot(reply_to_message_id)
        notice = NewReply(text, "notice", reply_to_message_id, covers_from_version=slot)
        params = codec.reply_params(conversation_id, notice, slot, slot, slot, now)
        async with self._transaction() as db:
            ensure = {"cid": conversation_id, "platform": params["platform"], "now": now}
            await self._rows("ensure_conversation", ensure, db)
            row = await self._one("insert_reply", params, db)
            assert row is not None
            await self._hint(db, f"outbox {params['platform']}")
        return self._outbox(row)
