"""Files on messages, from arrival to the prompt: what each is, what it costs, fetching it once.

- At arrival only the platform's description of a file is stored with its message
  (`events.Attachment`): nothing is downloaded before the ack (G7).
- When a burst is answered, `AttachmentLoader.burst` decides file by file. A kind the model reads
  (image, PDF, text) within the limits gets its bytes: fetched once, through the front end of its
  platform (`FileSource`), and kept in the store by SHA-256. Anything else becomes a one-line note
  naming the file and why. The outcome, bytes or note, is remembered per file, so no file is
  fetched twice and later prompts show it again without a download (Discord CDN links expire).
- History's files are never fetched: what was kept when their burst was answered is reused,
  newest first, as far as `llm.max_context_tokens` allows (`bot/core/prompt.py`).
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from bot.core.clock import Clock
from bot.core.events import Attachment, ConversationKey
from bot.core.frontend import file_source
from bot.core.settings import AttachmentLimits
from bot.core.store import FileStore, HistoryItem, StoredFile, StoredMessage

log = logging.getLogger("burstbot.attachments")

Kind = Literal["image", "pdf", "text"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
TEXT_TYPES = frozenset(
    {"application/json", "application/x-ndjson", "application/xml", "application/yaml",
     "application/x-yaml", "application/toml", "application/sql", "application/javascript",
     "application/x-sh", "application/x-python", "application/csv"}
)  # fmt: skip
TEXT_SUFFIXES = frozenset(
    {".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".log", ".yaml",
     ".yml", ".toml", ".ini", ".cfg", ".conf", ".env", ".xml", ".html", ".css", ".sql", ".sh",
     ".py", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
     ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".scala", ".lua", ".pl", ".r", ".diff",
     ".patch", ".tex", ".dockerfile", ".proto", ".graphql"}
)  # fmt: skip
API_LIMITS: Mapping[Kind, int] = {"image": 5 * 1024 * 1024, "pdf": 32 * 1024 * 1024}
NO_ROOM = "no room left in the context"
IMAGE_TOKENS_MAX = 1_600  # also with no dimensions given: Claude scales larger images down
PDF_TOKENS_PER_PAGE = 3_000  # text plus the page's image
PDF_BYTES_PER_PAGE = 100_000


def kind_of(attachment: Attachment) -> Kind | None:
    """What the model can read it as, by MIME type, else by file name; None: not readable."""
    mime = attachment.mime_type.split(";")[0].strip().lower()
    suffix = PurePosixPath(attachment.name.lower()).suffix
    if not mime or mime == "application/octet-stream":
        mime = mimetypes.guess_type(f"file{suffix}")[0] or ""
    if mime in IMAGE_TYPES:
        return "image"
    if mime == "application/pdf":
        return "pdf"
    if mime.startswith("text/") or mime in TEXT_TYPES or suffix in TEXT_SUFFIXES:
        return "text"
    return None


def estimate_tokens(attachment: Attachment, size: int | None = None) -> int:
    """Input tokens the file will cost, as the context budget and the cost guards count them
    (docs/files.md; the API reports the real figure); 0 for a kind never sent."""
    kind, size = kind_of(attachment), attachment.size if size is None else size
    if kind == "image":
        pixels = attachment.width * attachment.height
        return min(IMAGE_TOKENS_MAX, max(1, pixels // 750)) if pixels else IMAGE_TOKENS_MAX
    if kind == "pdf":
        return PDF_TOKENS_PER_PAGE * max(1, -(-size // PDF_BYTES_PER_PAGE))
    if kind == "text":
        return size // 4 + 1
    return 0


def human_size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            value = size / scale  # three figures, but never an exponent (1000 to 1023)
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class LoadedFile:
    """One file as a prompt carries it: readable content with its media type, or a note."""

    attachment: Attachment
    kind: Kind | None
    media_type: str = ""
    content: bytes | None = None
    note: str | None = None

    @property
    def tokens(self) -> int:
        if self.content is None:
            return len(self.note_line()) // 4 + 1
        return estimate_tokens(self.attachment, len(self.content))

    def note_line(self) -> str:
        """`[file report.zip (application/zip, 2.1 MB) not included: unsupported file type]`."""
        a = self.attachment
        facts = ", ".join(x for x in (a.mime_type, human_size(a.size) if a.size else "") if x)
        described = f"{a.name} ({facts})" if facts else a.name
        return f"[file {described} not included: {self.note or 'not available'}]"

    def as_note(self, note: str) -> LoadedFile:
        return LoadedFile(self.attachment, self.kind, note=note)


def attachment_uid(key: ConversationKey, attachment: Attachment) -> str:
    return f"{key.platform}/{key.workspace}/{attachment.platform_id}"


def readable(attachment: Attachment, kind: Kind | None, content: bytes) -> LoadedFile:
    """The bytes as the model will get them, checked to be what they claim (the API refuses an
    image whose bytes do not match its media type, and would fail the whole burst)."""
    loaded = LoadedFile(attachment, kind)
    if kind == "image":
        media_type = _image_type(content)
        if media_type is None:
            return loaded.as_note("not a PNG, JPEG, GIF or WebP image")
        return LoadedFile(attachment, kind, media_type, content)
    if kind == "pdf":
        if not content.startswith(b"%PDF-"):
            return loaded.as_note("not a PDF")
        return LoadedFile(attachment, kind, "application/pdf", content)
    try:
        if b"\x00" in content:
            raise UnicodeDecodeError("utf-8", content, 0, 1, "binary")
        content.decode("utf-8")
    except UnicodeDecodeError:
        return loaded.as_note("not UTF-8 text")
    return LoadedFile(attachment, "text", "text/plain", content)


def _image_type(content: bytes) -> str | None:
    if content.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if content.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if content.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(eq=False)
class AttachmentLoader:
    """Turns stored attachment descriptions into prompt files, fetching each file at most once."""

    store: FileStore
    sources: Mapping[str, object]
    read_limits: Callable[[], AttachmentLimits]  # read at each use: a reload replaces them
    clock: Clock

    @property
    def limits(self) -> AttachmentLimits:
        return self.read_limits()

    def max_bytes(self, kind: Kind | None) -> int:
        limit = API_LIMITS.get(kind) if kind is not None else None
        return min(self.limits.max_bytes, limit) if limit else self.limits.max_bytes

    async def burst(
        self, key: ConversationKey, messages: Sequence[StoredMessage]
    ) -> list[tuple[LoadedFile, ...]]:
        """Each message's files, in order; the burst's total stays within `max_total_bytes`."""
        total, cap = 0, self.limits.max_total_bytes
        loaded: list[tuple[LoadedFile, ...]] = []
        for message in messages:
            files: list[LoadedFile] = []
            for index, attachment in enumerate(message.attachments):
                file = await self._load(key, attachment, index, total, fetch=True)
                if file.content is not None and total + len(file.content) > cap:
                    file = file.as_note(f"the burst's files exceed {human_size(cap)}")
                total += len(file.content or b"")
                files.append(file)
            loaded.append(tuple(files))
        return loaded

    async def history(
        self, key: ConversationKey, items: Sequence[HistoryItem], budget: int
    ) -> dict[int, tuple[LoadedFile, ...]]:
        """Files kept for earlier turns (by index in `items`), newest first while their estimated
        tokens fit `budget`; older ones come as notes, unread, so the prompt still names them.
        Nothing is fetched."""
        found: dict[int, tuple[LoadedFile, ...]] = {}
        for index in range(len(items) - 1, -1, -1):
            attachments = items[index].attachments
            if not attachments:
                continue
            if budget <= 0:
                found[index] = tuple(LoadedFile(a, kind_of(a), note=NO_ROOM) for a in attachments)
                continue
            files = [await self._load(key, a, n, 0, fetch=False) for n, a in enumerate(attachments)]
            budget -= sum(f.tokens for f in files)
            found[index] = tuple(files)
        return found

    async def _load(
        self, key: ConversationKey, attachment: Attachment, index: int, total: int, fetch: bool
    ) -> LoadedFile:
        kind = kind_of(attachment)
        unread = LoadedFile(attachment, kind)
        refusal = self._refusal(attachment, kind, index, total)
        if refusal is not None:
            return unread.as_note(refusal)
        uid = attachment_uid(key, attachment)
        stored = await self.store.attachment_file(uid)
        if stored is None:
            if not fetch:
                return unread.as_note("not downloaded")
            stored = await self._fetch(key, attachment, kind)
            await self.store.keep_attachment_file(uid, stored, self.clock.now())
        if stored.content is None:
            return unread.as_note(stored.note or "not available")
        return readable(attachment, kind, stored.content)

    def _refusal(
        self, attachment: Attachment, kind: Kind | None, index: int, total: int
    ) -> str | None:
        """Why the file is not sent, decided from its description alone (no download)."""
        limits = self.limits
        if not limits.enabled:
            return "attachments are switched off"
        if index >= limits.max_per_message:
            return f"only {limits.max_per_message} files per message are read"
        if kind is None:
            return "unsupported file type"
        if attachment.size > self.max_bytes(kind):
            return f"larger than the {human_size(self.max_bytes(kind))} limit"
        if total + attachment.size > limits.max_total_bytes:
            return f"the burst's files exceed {human_size(limits.max_total_bytes)}"
        return None

    async def _fetch(
        self, key: ConversationKey, attachment: Attachment, kind: Kind | None
    ) -> StoredFile:
        source = file_source(self.sources.get(key.platform))
        if source is None:
            return StoredFile(None, "this platform's files cannot be downloaded")
        limit = self.max_bytes(kind)
        try:
            content = await source.fetch_attachment(key, attachment, limit)
        except Exception as exc:  # a download never fails the burst: the file becomes a note
            log.warning("%s: file %s not downloaded (%s)", key.id, attachment.platform_id, exc)
            return StoredFile(None, f"download failed ({exc})")
        if len(content) > limit:
            return StoredFile(None, f"larger than the {human_size(limit)} limit")
        return StoredFile(hashlib.sha256(content).hexdigest(), None, content)
