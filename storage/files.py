"""The store's side of attachments (`bot.core.store.Store`): what each file's one
fetch gave, and its bytes, kept once per SHA-256 however many messages share them."""

from __future__ import annotations

from bot.core.store import StoredFile
from storage.seam import Conn, StoreSeam


class FileSteps(StoreSeam[Conn]):
    async def attachment_file(self, uid: str) -> StoredFile | None:
        rows = await self._rows("attachment_file", {"uid": uid})
        if not rows:
            return None
        content = rows[0]["content"]
        return StoredFile(
            rows[0]["sha256"], rows[0]["note"], None if content is None else bytes(content)
        )

    async def keep_attachment_file(self, uid: str, file: StoredFile, now: float) -> None:
        """One transaction: the bytes (unless that hash is kept already), then the outcome."""
        async with self._transaction() as db:
            if file.sha256 is not None and file.content is not None:
                blob = {"sha256": file.sha256, "content": file.content, "now": now}
                await self._rows("keep_attachment_blob", blob, db)
            outcome = {"uid": uid, "sha256": file.sha256, "note": file.note, "now": now}
            await self._rows("keep_attachment_file", outcome, db)
