"""The terminal front end: each stdin line is a message from the local user.

Lines typed quickly form one burst and get one reply. When stdin ends, pending input is answered at
once (no need to wait for the quiet window) and the process is asked to stop. A line `/reset`
clears the conversation's history for later prompts; a line `/attach PATH` sends a local file
(read when the burst is answered, like a platform's).
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bot.core.errors import BurstbotError, FetchError
from bot.core.events import (
    Attachment,
    ConversationKey,
    IncomingMessage,
    Reply,
    ResetConversation,
)
from bot.core.frontend import FileSource, Host

CONSOLE_KEY = ConversationKey("console", "local", "terminal")
SETTLE_POLL_SECONDS = 0.05
RESET_COMMAND = "/reset"
ATTACH_COMMAND = "/attach "


def local_attachment(typed: str) -> Attachment | None:
    """A local file as an attachment (None: no such file); its id changes when the file does."""
    path = Path(typed.strip()).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    version = f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    return Attachment(
        platform_id=hashlib.sha256(version).hexdigest()[:32],
        name=path.name,
        mime_type=mimetypes.guess_type(path.name)[0] or "",
        size=stat.st_size,
        url=path.as_uri(),
    )


def _read_local(url: str, max_bytes: int) -> bytes:
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise FetchError("not a local file", permanent=True)
    try:
        with open(unquote(parts.path), "rb") as file:
            content = file.read(max_bytes + 1)
    except OSError as exc:
        raise FetchError(exc.strerror or "cannot read the file", permanent=True) from exc
    if len(content) > max_bytes:
        raise FetchError("larger than the limit", permanent=True)
    return content


class ConsoleFrontend(FileSource):
    platform = "console"

    def __init__(self, user_name: str = "you") -> None:
        self.user_name = user_name
        self.stdin = sys.stdin
        self.stdout = sys.stdout
        self.indicator = sys.stderr if sys.stderr.isatty() else None
        self._run_id = f"{time.time_ns():x}"
        self._printed: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self, host: Host) -> None:
        self._task = asyncio.create_task(self._serve(host))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _serve(self, host: Host) -> None:
        """A store that fails (locked, read-only) ends the session (`Host.frontend_failed`): the
        process exits non-zero instead of waiting on a reader that is gone."""
        try:
            await self._read(host)
        except BurstbotError as exc:
            host.frontend_failed(self.platform, exc)

    async def _read(self, host: Host) -> None:
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def pump() -> None:  # a daemon thread, so a blocked read never holds up shutdown
            for line in self.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=pump, name="console-stdin", daemon=True).start()
        count = 0
        while (line := await lines.get()) is not None:
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            if text.strip() == RESET_COMMAND:
                result = await host.ingest(ResetConversation(CONSOLE_KEY, "local"))
                cleared = result.status == "history"
                self.stdout.write("(history cleared)\n" if cleared else "(reset not allowed)\n")
                self.stdout.flush()
                continue
            attachments: tuple[Attachment, ...] = ()
            if text.startswith(ATTACH_COMMAND):
                attachment = local_attachment(text.removeprefix(ATTACH_COMMAND))
                if attachment is None:
                    self.stdout.write(f"(no such file: {text.removeprefix(ATTACH_COMMAND)})\n")
                    self.stdout.flush()
                    continue
                text, attachments = "", (attachment,)
            count += 1
            message_id = f"{self._run_id}-{count}"
            await host.ingest(
                IncomingMessage(CONSOLE_KEY, message_id, "local", self.user_name, text,
                                attachments=attachments)
            )  # fmt: skip
        await host.flush(CONSOLE_KEY)
        # The answer may come from another process sharing the database: poll the stored state.
        while not await host.is_settled(CONSOLE_KEY):  # noqa: ASYNC110
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        host.request_stop()

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        return await asyncio.to_thread(_read_local, attachment.url, max_bytes)

    async def deliver(self, reply: Reply) -> list[str]:
        if reply.id not in self._printed:
            reply.fence.check()
            self._printed.add(reply.id)
            await self.show_busy(reply.key, False, reply.id)
            self.stdout.write(f"burstbot: {reply.text}\n")
            self.stdout.flush()
        return [reply.id]

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        if self.indicator is not None:
            self.indicator.write("\r(thinking…)" if busy else "\r" + " " * 12 + "\r")
            self.indicator.flush()
