"""`burstbot retry CONVERSATION|REPLY`: a reply whose delivery failed for good, posted again.

Only a `failed` reply is re-queued: pending again, due now, its failed attempts forgotten (the
give-up horizon starts anew), its last error kept for `explain`; a pending or sent reply belongs
to the outbox. A running `burstbot run` picks it up like any reply (woken at once on PostgreSQL,
on its next poll on SQLite), and its idempotency key still guards against a double post.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from bot.core.errors import BurstbotError

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

REPLY_ID = re.compile(r"r?(\d+)")


def reply_id_of(target: str) -> int | None:
    """The reply id `target` names (`r12` or `12`), or None: then it names a conversation."""
    found = REPLY_ID.fullmatch(target.strip())
    return int(found.group(1)) if found else None


async def requeue_reply(store: SqlStore[Any], reply_id: int, now: float) -> str:
    if await store.requeue_failed(reply_id, None, now):
        return f"re-queued r{reply_id}: a running burstbot posts it now"
    state = await store.reply_state(reply_id)
    if state is None:
        raise BurstbotError(f"no reply r{reply_id} (see `burstbot explain CONVERSATION`)")
    raise BurstbotError(f"reply r{reply_id} is {state}, not failed: nothing to retry")


async def requeue_conversation(store: SqlStore[Any], conversation_id: str, now: float) -> str:
    requeued = await store.requeue_failed(None, conversation_id, now)
    if requeued:
        ids = ", ".join(f"r{reply_id}" for reply_id in requeued)
        return f"re-queued {ids} of {conversation_id}: a running burstbot posts them now"
    if await store.conversation_state(conversation_id) is None:
        raise BurstbotError(f"no conversation {conversation_id!r} (see `burstbot status --all`)")
    raise BurstbotError(f"no failed reply in {conversation_id}: nothing to retry")
