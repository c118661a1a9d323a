"""Building one prompt per burst: earlier turns trimmed to a token budget, then the whole burst.

Files travel with the message they came with. The burst's images and PDFs are always included
(the attachment limits bound them); its text files are cut to the budget left. Earlier turns, and
then their files, fill what budget is left, newest first. A file left out for want of room is
named in a note instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bot.core.attachments import NO_ROOM, AttachmentLoader, LoadedFile, human_size
from bot.core.events import ConversationKey
from bot.core.replier import BurstMessage, GenerationProgress, Prompt, Replier, Turn
from bot.core.settings import MAX_REQUEST_FILE_BYTES, EngineSettings, Voice
from bot.core.store import HistoryItem, StoredMessage
from bot.core.tool_calls import BurstTools

MAX_IMAGES = 100
MIN_TEXT_TOKENS = 250  # less room than this: a note instead of a stub of the file


def estimate_tokens(text: str) -> int:
    """A cheap, conservative estimate (about four characters a token) used only for trimming."""
    return len(text) // 4 + 1


@dataclass
class Room:
    """What one request has left for earlier turns' files: context tokens, bytes (the request
    must stay under Claude's size limit) and images (Claude reads at most 100 a request)."""

    tokens: int
    file_bytes: int
    images: int = MAX_IMAGES

    def fits(self, file: LoadedFile) -> bool:
        size, image = len(file.content or b""), file.kind == "image"
        return file.tokens <= self.tokens and size <= self.file_bytes and self.images >= image

    def take(self, file: LoadedFile) -> None:
        self.tokens -= file.tokens
        self.file_bytes -= len(file.content or b"")
        self.images -= file.kind == "image"


def build_prompt(
    voice: str | Voice,
    history: Sequence[HistoryItem],
    burst: Sequence[StoredMessage],
    max_context_tokens: int,
    burst_files: Sequence[tuple[LoadedFile, ...]] = (),
    history_files: Mapping[int, tuple[LoadedFile, ...]] | None = None,
    max_file_bytes: int = MAX_REQUEST_FILE_BYTES,
) -> Prompt:
    """The burst is always kept whole; history fills what budget is left, newest turns first,
    and its files while the context, `max_file_bytes` and the image count allow. `voice` is the
    system prompt, or it with the conversation's model settings."""
    voice = Voice(voice) if isinstance(voice, str) else voice
    system = voice.system
    room = Room(max_context_tokens - estimate_tokens(system), max_file_bytes)
    pairs = list(zip(burst, list(burst_files) or [() for _ in burst], strict=True))
    room.tokens -= sum(
        estimate_tokens(BurstMessage(m.author_name, m.text, f).line()) for m, f in pairs
    )
    messages = tuple(
        BurstMessage(m.author_name, m.text, tuple(_burst_file(file, room) for file in files))
        for m, files in pairs
    )
    kept: list[Turn] = []
    for index in range(len(history) - 1, -1, -1):
        item = history[index]
        text = item.text if item.role == "assistant" else f"{item.author_name}: {item.text}"
        cost = estimate_tokens(text)
        if cost > room.tokens:
            break
        room.tokens -= cost
        included: list[LoadedFile] = []
        notes: list[str] = []
        for file in (history_files or {}).get(index, ()):
            if file.content is not None and room.fits(file):
                room.take(file)
                included.append(file)
            else:
                notes.append((file if file.content is None else file.as_note(NO_ROOM)).note_line())
        kept.append(Turn(item.role, "\n".join([text, *notes]), tuple(included)))
    kept.reverse()
    return Prompt(system, tuple(kept), messages, voice.model, voice.max_tokens, voice.tools)


def _burst_file(file: LoadedFile, room: Room) -> LoadedFile:
    """The burst's images and PDFs are always sent (the attachment limits bound them), up to 100
    images. Text is the one kind whose tokens the byte limits do not bound (5 MB of log is over a
    million tokens): a text file longer than the context has left is cut to fit."""
    if file.content is None:
        return file
    if file.kind == "image" and room.images < 1:
        return file.as_note(f"Claude reads at most {MAX_IMAGES} images at once")
    if file.kind == "text" and file.tokens > room.tokens:
        if room.tokens < MIN_TEXT_TOKENS:
            return file.as_note(f"about {file.tokens} tokens, more than the context has left")
        file = _cut(file, room.tokens)
    room.take(file)
    return file


def _cut(file: LoadedFile, tokens: int) -> LoadedFile:
    """The start of a text file, about `tokens` long, saying where it was cut."""
    assert file.content is not None
    kept = file.content[: tokens * 4 - 400].decode("utf-8", errors="ignore")
    total, shown = human_size(len(file.content)), human_size(len(kept.encode()))
    marker = f"\n[cut here to fit the context: the first {shown} of {total}]"
    return LoadedFile(file.attachment, "text", "text/plain", (kept + marker).encode())


ContextSource = Callable[[ConversationKey], Awaitable[str]]
"""What the conversation's surroundings add to the system prompt ("" for nothing): the composition
root asks the front end (the channel a Slack user is viewing, its recent messages)."""


@dataclass(eq=False)
class PromptStep:
    """Step 4's input, built inside the generation task the engine supervises: the burst's files
    and the conversation's context are fetched there (the lease is renewed and newer input cancels
    it meanwhile), then one prompt goes to the replier. `settings` is read at each burst: a reload
    replaces them."""

    settings: Callable[[], EngineSettings]
    files: AttachmentLoader
    context: ContextSource | None = None

    async def generate(
        self,
        replier: Replier,
        key: ConversationKey,
        history: Sequence[HistoryItem],
        burst: Sequence[StoredMessage],
        usage: GenerationProgress,
        calls: BurstTools | None = None,
    ) -> str:
        settings = self.settings()
        max_tokens = settings.max_context_tokens
        burst_files = await self.files.burst(key, burst)
        history_files = await self.files.history(key, history, max_tokens)
        voice = settings.voice_for(key)
        surroundings = "" if self.context is None else (await self.context(key)).strip()
        if surroundings:
            voice = replace(voice, system=f"{voice.system}\n\n{surroundings}")
        max_bytes = settings.attachments.max_total_bytes
        prompt = build_prompt(
            voice, history, burst, max_tokens, burst_files, history_files, max_bytes
        )
        if calls is not None and voice.tools.mcp:
            await calls.prepare(voice.tools.mcp, voice.tools.max_tool_calls)
            prompt = replace(prompt, calls=calls)
        return await replier.generate(prompt, usage)
