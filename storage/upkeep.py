"""Statements outside the burst pipeline, mixed into `SqlStore`: a typing notice stretching a
pending burst's quiet window (`bot/core/typing_window.py`), retention and erasure on request
(`bot/ops/retention.py`), failed replies re-queued by hand (`bot/ops/requeue.py`). None of them
touches pending work: unanswered messages, replies still in the outbox, armed timers."""

from __future__ import annotations

from bot.core.attachments import attachment_uid
from bot.core.events import ConversationKey
from bot.ops.health import Backlog
from storage.rows import Params, attachments_from_json
from storage.seam import Conn, StoreSeam

PRUNED = ("messages", "replies", "generations", "files", "blobs")


class Upkeep(StoreSeam[Conn]):
    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        """One conditional UPDATE of an armed timer (see `extend_quiet_for_typing`)."""
        params = {"cid": conversation_id, "author": author_id, "until": until, "now": now}
        rows = await self._rows("extend_quiet_for_typing", params)
        return float(rows[0][0]) if rows else None

    async def backlog(self) -> Backlog:
        [row] = await self._rows("backlog", {})
        oldest = None if row["oldest_pending_at"] is None else float(row["oldest_pending_at"])
        return Backlog(int(row["outbox_depth"]), oldest, int(row["outbox_failed"]))

    async def requeue_failed(
        self, reply_id: int | None, conversation_id: str | None, now: float
    ) -> list[int]:
        """One statement: the failed reply `reply_id`, or every failed reply of the conversation,
        pending again and due `now`; the ids re-queued, and a wake-up hint for the deliverers."""
        params = {"id": reply_id, "cid": conversation_id, "now": now}
        async with self._transaction() as db:
            rows = await self._rows("requeue_failed", params, db)
            for platform in sorted({str(r["platform"]) for r in rows}):
                await self._hint(db, f"outbox {platform}")
        return sorted(int(r["id"]) for r in rows)

    async def reply_state(self, reply_id: int) -> str | None:
        row = await self._one("reply_state", {"id": reply_id})
        return None if row is None else str(row[0])

    async def _counts(self, names: tuple[str, ...], prefix: str, params: Params) -> dict[str, int]:
        """Each statement alone (each is complete by itself; running them again is harmless)."""
        return {name: len(await self._rows(f"{prefix}_{name}", params)) for name in names}

    async def prune(self, cutoff: float) -> dict[str, int]:
        """Delete answered messages, settled replies and generations older than `cutoff`."""
        return await self._counts(PRUNED, "prune", {"cutoff": cutoff})

    async def prune_files(self, cutoff: float) -> dict[str, int]:
        """Delete downloaded files older than `cutoff` (and bytes nothing refers to any more);
        the messages that carried them keep their descriptions."""
        return await self._counts(("files", "blobs"), "prune", {"cutoff": cutoff})

    async def forget_user(self, user_id: str, platform: str | None) -> dict[str, int]:
        """Erase a person's messages (text, name, id) everywhere, or on one platform."""
        params = {"user": user_id, "platform": platform}
        files = await self._forget_files("user_files", params)
        tables = ("messages", "held", "generations", "actions")
        counts = await self._counts(tables, "forget_user", params)
        return {**counts, "files": files}

    async def forget_conversation(self, conversation_id: str) -> dict[str, int]:
        """Erase a conversation's messages and posted replies (and leave all of it out of later
        prompts, as `/reset` does); count the replies still unsent."""
        params = {"cid": conversation_id}
        await self._rows("reset_history", params)
        files = await self._forget_files("conversation_files", params)
        tables = ("messages", "replies", "held", "generations", "actions")
        counts = await self._counts(tables, "forget_conversation", params)
        await self._rows("forget_conversation_notes", params)  # the viewed channel, a title
        unsent = await self._rows("unsent_replies", params)
        return {**counts, "files": files, "unsent_replies_kept": int(unsent[0][0])}

    async def _forget_files(self, selected: str, params: Params) -> int:
        """Delete the kept files (and bytes no other file shares) of the messages `selected`
        reads, before their descriptions are erased with the text."""
        uids = {attachment_uid(ConversationKey.parse(str(r[0])), a)
                for r in await self._rows(selected, params)
                for a in attachments_from_json(str(r[1]))}  # fmt: skip
        for uid in uids:
            await self._rows("forget_file", {"uid": uid})
        await self._rows("prune_blobs", {})
        return len(uids)
