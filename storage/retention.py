"""Retention and erasure on request (`bot/ops/retention.py`, `burstbot forget`). None of it
touches pending work: unanswered messages, replies still in the outbox, armed timers. Each
erase, and each sweep, ends with the backend's `_off_disk`, so erased text leaves its files
(SQLite's write-ahead log) and not only its tables."""

from __future__ import annotations

from bot.core.attachments import attachment_uid
from bot.core.events import ConversationKey
from storage.rows import Params, attachments_from_json
from storage.seam import Conn, StoreSeam

PRUNED = ("messages", "replies", "generations", "votes", "clicks", "files", "blobs")


class RetentionSteps(StoreSeam[Conn]):
    async def _counts(self, names: tuple[str, ...], prefix: str, params: Params) -> dict[str, int]:
        """Each statement alone (each is complete by itself; running them again is harmless)."""
        return {name: len(await self._rows(f"{prefix}_{name}", params)) for name in names}

    async def prune(self, cutoff: float) -> dict[str, int]:
        """Delete answered messages, settled replies (and their votes), clicks and generations
        older than `cutoff`."""
        return await self._swept(await self._counts(PRUNED, "prune", {"cutoff": cutoff}))

    async def prune_files(self, cutoff: float) -> dict[str, int]:
        """Delete downloaded files older than `cutoff` (and bytes nothing refers to any more);
        the messages that carried them keep their descriptions."""
        return await self._swept(
            await self._counts(("files", "blobs"), "prune", {"cutoff": cutoff})
        )

    async def forget_user(self, user_id: str, platform: str | None, now: float) -> dict[str, int]:
        """Erase a person's messages (text, name, id), votes and clicks everywhere, or on one
        platform. An answer still being generated where they spoke loses its fence first, and
        what the others said is answered again at `now`, from a prompt without the erased text."""
        params = {"user": user_id, "platform": platform}
        fenced = await self._rows("forget_user_fence", params)
        files = await self._forget_files("user_files", params)
        for named in ("decisions", "stopped_answers", "stopped_generations"):
            await self._rows(f"forget_user_{named}", params)  # before their clicks lose their id
        tables = ("messages", "held", "generations", "actions", "cards", "votes", "clicks")
        counts = await self._counts(tables, "forget_user", params)
        for row in fenced:  # due again only once the text is gone, or a prompt could still read it
            await self._rows("restore_timer", {"cids": self._array([row[0]])})  # no lease holds it
            await self._rows("forget_user_rearm", {"cid": row[0], "now": now})
        await self._off_disk()
        return {**counts, "files": files}

    async def forget_conversation(self, conversation_id: str) -> dict[str, int]:
        """Erase a conversation's messages, posted replies, votes and who clicked (and leave all
        of it out of later prompts, as `/reset` does); count the replies still unsent. An answer
        still being generated loses its lease's fence first, so it is discarded rather than
        stored after."""
        params = {"cid": conversation_id}
        await self._rows("forget_conversation_fence", params)  # an answer under way is discarded
        await self._rows("forget_conversation_timer", params)
        await self._rows("reset_history", params)
        files = await self._forget_files("conversation_files", params)
        tables = ("messages", "replies", "held", "generations", "actions", "votes", "clicks")
        counts = await self._counts(tables, "forget_conversation", params)
        await self._rows("forget_conversation_notes", params)  # the viewed channel, a title
        unsent = await self._rows("unsent_replies", params)
        await self._off_disk()
        return {**counts, "files": files, "unsent_replies_kept": int(unsent[0][0])}

    async def _swept(self, counts: dict[str, int]) -> dict[str, int]:
        """A sweep's deletes off the disk too. One that deleted nothing still finishes what an
        earlier erase could not, in this process or in another (`burstbot forget`, which has
        exited since)."""
        await self._off_disk()
        return counts

    async def _forget_files(self, selected: str, params: Params) -> int:
        """Delete the kept files (and bytes no other file shares) of the messages `selected`
        reads, before their descriptions are erased with the text."""
        uids = {
            attachment_uid(ConversationKey.parse(str(r[0])), a)
            for r in await self._rows(selected, params)
            for a in attachments_from_json(str(r[1]))
        }
        for uid in uids:
            await self._rows("forget_file", {"uid": uid})
        await self._rows("prune_blobs", {})
        return len(uids)
