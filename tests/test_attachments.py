"""Attachments between the store and the prompt: kinds, limits (decided before any download),
fetching once, the context budget, the offline replier and the cost guards."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace

import pytest

from bot.config import AttachmentsConfig, parse_config
from bot.core.attachments import (
    AttachmentLoader,
    LoadedFile,
    StoredFile,
    estimate_tokens,
    human_size,
    kind_of,
    readable,
)
from bot.core.errors import ConfigError, FetchError
from bot.core.events import Attachment, ConversationKey, IncomingMessage
from bot.core.frontend import FileSource
from bot.core.prompt import NO_ROOM, build_prompt
from bot.core.replier import GenerationProgress
from bot.core.store import HistoryItem, StoredMessage
from bot.llm.offline import OfflineReplier
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.apps import make_app, step
from tests.conftest import make_engine

KEY = ConversationKey("test", "w1", "c1")
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 40


def file(n: int, name: str = "a.png", mime: str = "image/png", size: int = 48) -> Attachment:
    return Attachment(f"F{n}", name, mime, size, f"https://files.example/F{n}")


def stored(*attachments: Attachment, seq: int = 1) -> StoredMessage:
    return StoredMessage(seq, f"m{seq}", "u1", "alice", "look", 0.0, None, False, "", attachments)


class Files(FileSource):
    """A front end's download side: serves `content` by file id, records every request."""

    platform = "test"

    def __init__(self, content: dict[str, bytes]) -> None:
        self.content = content
        self.requests: list[tuple[str, int]] = []

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        self.requests.append((attachment.platform_id, max_bytes))
        if attachment.platform_id not in self.content:
            raise FetchError("HTTP 404")
        return self.content[attachment.platform_id]


def loader(store: SqliteStore, source: Files, **limits: object) -> AttachmentLoader:
    config = AttachmentsConfig.model_validate(limits)
    return AttachmentLoader(store, {"test": source}, lambda: config, FakeClock())


@pytest.mark.parametrize(
    ("name", "mime", "kind"),
    [
        ("a.png", "image/png", "image"),
        ("a.jpg", "image/jpeg", "image"),
        ("a.gif", "image/gif", "image"),
        ("a.webp", "image/webp", "image"),
        ("r.pdf", "application/pdf", "pdf"),
        ("e.csv", "text/csv", "text"),
        ("n.md", "", "text"),  # Discord often gives no content type
        ("main.py", "application/octet-stream", "text"),
        ("data.json", "application/json", "text"),
        ("photo.jpeg", "", "image"),
        ("a.zip", "application/zip", None),
        ("logo.svg", "image/svg+xml", None),
        ("clip.mov", "video/quicktime", None),
    ],
)
def test_kind_of_a_file(name: str, mime: str, kind: str | None) -> None:
    assert kind_of(Attachment("F1", name, mime, 1, "")) == kind


def test_token_estimates() -> None:
    assert estimate_tokens(replace(file(1), width=640, height=480)) == 640 * 480 // 750
    assert estimate_tokens(replace(file(1), width=4000, height=3000)) == 1600  # scaled down
    assert estimate_tokens(file(1)) == 1600  # no dimensions: the most an image costs
    assert estimate_tokens(file(1, "r.pdf", "application/pdf", 250_000)) == 9000  # three pages
    assert estimate_tokens(file(1, "e.csv", "text/csv", 400)) == 101
    assert estimate_tokens(file(1, "a.zip", "application/zip", 10**9)) == 0


def test_bytes_are_checked_to_be_what_they_claim() -> None:
    assert readable(file(1), "image", JPEG).media_type == "image/jpeg"  # sniffed, not trusted
    assert readable(file(1), "image", b"<html>").note == "not a PNG, JPEG, GIF or WebP image"
    assert readable(file(1, "r.pdf"), "pdf", b"PK\x03\x04").note == "not a PDF"
    assert readable(file(1, "a.txt"), "text", b"ab\x00cd").note == "not UTF-8 text"
    assert readable(file(1, "a.txt"), "text", b"\xff\xfe").note == "not UTF-8 text"
    assert readable(file(1, "a.txt"), "text", "héllo".encode()).content == "héllo".encode()


async def test_limits_are_decided_before_any_download(store: SqliteStore) -> None:
    source = Files({f"F{n}": PNG for n in range(1, 9)})
    limited = loader(store, source, max_per_message=2, max_total_bytes=100)
    burst = [
        stored(file(1), file(2), file(3)),  # the third is one file too many
        stored(file(4, "a.zip", "application/zip"), file(5, size=90), seq=2),  # 48 + 90 > 100
    ]
    files = await limited.burst(KEY, burst)
    assert [[f.note for f in m] for m in files] == [
        [None, None, "only 2 files per message are read"],
        ["unsupported file type", "the burst's files exceed 100 bytes"],
    ]
    assert [r[0] for r in source.requests] == ["F1", "F2"]
    assert source.requests[0][1] == 5 * 1024 * 1024  # an image: Claude's 5 MB at most


async def test_switched_off_nothing_is_downloaded(store: SqliteStore) -> None:
    source = Files({"F1": PNG})
    [[only]] = await loader(store, source, enabled=False).burst(KEY, [stored(file(1))])
    assert (
        only.note_line()
        == "[file a.png (image/png, 48 bytes) not included: attachments are switched off]"
    )
    assert source.requests == []


async def test_each_file_is_fetched_once_whatever_the_outcome(store: SqliteStore) -> None:
    source = Files({"F1": PNG})
    files = loader(store, source)
    burst = [stored(file(1), file(2))]
    first = await files.burst(KEY, burst)
    again = await loader(store, source).burst(KEY, burst)  # a later worker, a new loader
    assert first == again
    assert [(f.content, f.note) for f in first[0]] == [
        (PNG, None),
        (None, "download failed (HTTP 404)"),
    ]
    assert [r[0] for r in source.requests] == ["F1", "F2"]
    kept = await store.attachment_file("test/w1/F1")
    assert kept == StoredFile(hashlib.sha256(PNG).hexdigest(), None, PNG)


async def test_more_bytes_than_declared_are_refused(store: SqliteStore) -> None:
    source = Files({"F1": b"a" * 2000})
    [[text]] = await loader(store, source, max_bytes=1000).burst(
        KEY,
        [stored(file(1, "a.txt", "text/plain", size=0))],  # the platform did not say
    )
    assert text.note == "larger than the 1000 bytes limit"


async def test_history_files_are_never_fetched(store: SqliteStore) -> None:
    source = Files({"F1": PNG})
    item = HistoryItem("user", "alice", "look", 1, (file(1),))
    found = await loader(store, source).history(KEY, [item], 10_000)
    assert found[0][0].note == "not downloaded" and source.requests == []


async def test_history_files_past_the_budget_are_notes_not_dropped(store: SqliteStore) -> None:
    old, new = file(1, "old.png"), file(2, "new.png")
    items = [HistoryItem("user", "alice", "", 1, (old,)), HistoryItem("user", "bob", "", 2, (new,))]
    found = await loader(store, Files({})).history(KEY, items, 1)  # room for the newest only
    assert sorted(found) == [0, 1]
    assert found[0][0].note == NO_ROOM and found[1][0].note == "not downloaded"


def test_history_files_fit_the_budget_newest_first() -> None:
    old, new = file(1, "old.txt", "text/plain"), file(2, "new.txt", "text/plain")
    history = [
        HistoryItem("user", "alice", "one", 1, (old,)),
        HistoryItem("user", "bob", "two", 2, (new,)),
    ]
    loaded = {
        0: (LoadedFile(old, "text", "text/plain", b"x" * 400),),  # ~101 tokens
        1: (LoadedFile(new, "text", "text/plain", b"y" * 400),),
    }
    burst = [StoredMessage(3, "m3", "u1", "alice", "and?", 0.0, None, False)]
    prompt = build_prompt("", history, burst, 160, (), loaded)
    assert [(t.text, [f.attachment.name for f in t.files]) for t in prompt.history] == [
        (f"alice: one\n[file old.txt (text/plain, 48 bytes) not included: {NO_ROOM}]", []),
        ("bob: two", ["new.txt"]),
    ]


def test_history_files_stay_within_the_request_bytes_and_100_images() -> None:
    shots = [file(n) for n in range(1, 4)]
    history = [HistoryItem("user", "alice", f"shot {n}", n, (a,)) for n, a in enumerate(shots)]
    loaded = {n: (LoadedFile(a, "image", "image/png", PNG),) for n, a in enumerate(shots)}
    burst = [StoredMessage(9, "m9", "u1", "alice", "and?", 0.0, None, False)]
    prompt = build_prompt("", history, burst, 100_000, (), loaded, max_file_bytes=2 * len(PNG))
    assert [len(t.files) for t in prompt.history] == [0, 1, 1]  # the oldest: no bytes left
    assert NO_ROOM in prompt.history[0].text

    many = [LoadedFile(file(n), "image", "image/png", PNG) for n in range(101)]
    crowd = [StoredMessage(1, "m1", "u1", "alice", "look", 0.0, None, False, "", ())]
    [message] = build_prompt("", [], crowd, 10**9, [tuple(many)], None, 10**9).burst
    assert [f.note for f in message.files].count(None) == 100
    assert message.files[-1].note == "Claude reads at most 100 images at once"


async def test_the_offline_replier_says_what_it_got() -> None:
    shot = LoadedFile(file(1, "shot.png"), "image", "image/png", PNG)
    zipped = LoadedFile(file(2, "a.zip", "application/zip"), None, note="unsupported file type")
    burst = [StoredMessage(1, "m1", "u1", "alice", "", 0.0, None, False, "", (file(1), file(2)))]
    prompt = build_prompt("", [], burst, 8000, [(shot, zipped)])
    usage = GenerationProgress()
    text = await OfflineReplier().generate(prompt, usage)
    assert text.splitlines() == [
        "Got your 1 message:",
        "> alice: [shot.png, a.zip]",
        "> [got image shot.png: 48 bytes]",
        "> [file a.zip (application/zip, 48 bytes) not included: unsupported file type]",
    ]
    assert usage.input_tokens > 1600  # the image is counted: no dimensions, the full estimate


async def test_cost_guards_count_a_bursts_files_before_the_model_call(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, replier = RecordingFrontend(), ScriptedReplier()
    limits = {"user_daily_tokens": 1000, "budget_notice": "budget spent"}
    app = make_app(store, clock, replier, frontend, limits=limits)
    await app.ingest(IncomingMessage(KEY, "m1", "U1", "alice", "hi"))
    await step(app, clock)
    photo = IncomingMessage(KEY, "m2", "U1", "alice", "and this", attachments=(file(1),))
    await app.ingest(photo)  # ~1,600 tokens: more than the 1,000 a day
    await step(app, clock)
    assert len(replier.calls) == 1
    assert frontend.texts(KEY)[-1] == "budget spent"


async def test_a_file_too_large_to_send_costs_no_budget(
    store: SqliteStore, clock: FakeClock
) -> None:
    """It becomes a one-line note, so the budget must not count it (a 200 MB PDF would be
    estimated at six million tokens and refuse the burst)."""
    frontend, replier = RecordingFrontend(), ScriptedReplier()
    limits = {"user_daily_tokens": 1000, "budget_notice": "budget spent"}
    app = make_app(store, clock, replier, frontend, limits=limits)
    huge = file(1, "dump.pdf", "application/pdf", size=200 * 1024 * 1024)
    await app.ingest(IncomingMessage(KEY, "m1", "U1", "alice", "read this", attachments=(huge,)))
    await step(app, clock)
    assert len(replier.calls) == 1 and frontend.texts(KEY) != ["budget spent"]


def test_attachment_limits_are_validated_strictly() -> None:
    assert parse_config({}).attachments == AttachmentsConfig()
    for bad in ({"max_bytes": 0}, {"max_bytes": 33 * 1024 * 1024}, {"enabled": "yes"},
                {"max_per_message": -1}, {"max_total_bytes": 1.5}, {"max_files": 3}):  # fmt: skip
        with pytest.raises(ConfigError, match="attachments"):
            parse_config({"attachments": bad})


class SlowFiles(RecordingFrontend, FileSource):
    """A platform whose downloads wait until the test lets them finish."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        self.started.append(attachment.platform_id)
        self.asked.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(attachment.platform_id)
            raise
        return PNG


async def test_newer_input_during_a_download_supersedes_it_and_one_reply_covers_all(
    store: SqliteStore, clock: FakeClock
) -> None:
    """The download runs inside the supervised generation: newer input cancels it at once (its
    outcome is not recorded, so the next generation fetches it again) and nothing is lost."""
    files, replier = SlowFiles(), ScriptedReplier()
    engine = make_engine(store, clock, replier, files)
    await engine.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "", attachments=(file(1),)))
    await clock.advance(1.5)
    await engine.run_due()
    await asyncio.wait_for(files.asked.wait(), 5.0)
    await engine.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "what is this?"))
    await engine.idle()
    assert files.cancelled == ["F1"] and replier.calls == []
    assert [g.outcome for g in await store.generations(KEY.id)] == ["superseded"]
    assert await store.attachment_file("test/w1/F1") is None
    files.release.set()
    await clock.advance(1.5)
    await engine.run_due()
    await engine.idle()
    assert files.started == ["F1", "F1"]
    [call] = replier.calls
    assert [m.heading() for m in call.prompt.burst] == ["alice: [a.png]", "alice: what is this?"]
    assert call.prompt.burst[0].files[0].content == PNG
    assert len(files.posts) == 1
    await check_invariants(store, [KEY.id])


def test_a_long_text_file_in_the_burst_is_cut_to_the_context_and_images_stay() -> None:
    log = file(1, "app.log", "text/plain", 400_000)
    shot = file(2)
    content = ("line ü\n" * 50_000).encode()  # 400,000 bytes: about 100,000 tokens
    files = (
        LoadedFile(shot, "image", "image/png", PNG),
        LoadedFile(log, "text", "text/plain", content),
    )
    burst = [StoredMessage(1, "m1", "u1", "alice", "why?", 0.0, None, False, "", (shot, log))]
    [message] = build_prompt("", [], burst, 8000, [files]).burst
    image, text = message.files
    assert image.content == PNG  # always sent: 1,600 tokens of the 8,000
    assert text.content is not None and text.tokens <= 8000 - 1600
    head, marker = text.content.decode().rsplit("\n", 1)
    assert content.decode().startswith(head)
    assert marker.startswith("[cut here to fit the context: the first ") and marker.endswith(
        " of 391 KB]"
    )
    [cramped] = build_prompt("", [], burst, 1800, [files]).burst
    assert cramped.files[1].note == "about 100001 tokens, more than the context has left"


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (512, "512 bytes"),
        (1536, "1.5 KB"),
        (1000 * 1024, "1000 KB"),
        (1023 * 1024, "1023 KB"),
        (5 * 1024 * 1024, "5 MB"),
        (3 * 1024**3, "3 GB"),
    ],
)
def test_a_size_reads_as_plain_figures_never_an_exponent(size: int, shown: str) -> None:
    assert human_size(size) == shown
