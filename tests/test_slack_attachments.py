"""Files shared in Slack reach Claude: the real Slack front end (Bolt, signed HTTP events) and the
real Claude replier (Anthropic SDK) against the fake Slack (serving downloads to the bot token
only) and the fake Messages API (recording every content block), on a fake clock."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config import parse_config
from bot.wiring import claude_replier
from testkit.fake_anthropic import FakeAnthropic, RecordedRequest
from testkit.fake_slack import FakeSlackApi, dm
from tests.slack_harness import TOKEN, Bot, api, running_bot, ts

__all__ = ["api"]  # fixtures

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
CSV = b"service,errors\napi,3\nworker,0\n"


def png(width: int, height: int) -> bytes:
    """A real (grey) PNG: signature, IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))  # fmt: skip


def shape(request: RecordedRequest) -> list[tuple[str, list[str]]]:
    """Each message's role and its blocks: type, media type and size (text: characters)."""
    out = []
    for message in request.messages:
        blocks = []
        for block in message["content"]:
            if block["type"] == "text":
                blocks.append(f"text({len(block['text'])} chars)")
                continue
            source = block["source"]
            data = source["data"]
            size = len(base64.b64decode(data)) if source["type"] == "base64" else len(data)
            blocks.append(f"{block['type']}/{source['type']}({source['media_type']}, {size} bytes)")
        out.append((message["role"], blocks))
    return out


def files_of(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [b for m in request.messages for b in m["content"] if b["type"] == kind]


def text_of(request: RecordedRequest) -> str:
    return "\n".join(t for m in request.messages for t in request.texts(m))


@pytest.fixture
async def claude_bot(api: FakeSlackApi, server: FakeAnthropic) -> AsyncIterator[Bot]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0}
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV)
    async with running_bot(api, replier=replier) as bot:  # type: ignore[arg-type]
        yield bot
    await replier.aclose()


def shared(n: int, text: str, *files: dict[str, Any]) -> dict[str, Any]:
    return dm(ts(n), text, subtype="file_share", files=list(files))


async def test_a_screenshot_and_a_question_reach_claude_as_one_user_turn(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    screenshot = png(40, 30)
    file = api.share_file("F1", "screenshot.png", screenshot, "image/png",
                          original_w=40, original_h=30)  # fmt: skip
    assert await claude_bot.send(shared(1, "", file)) == 200
    assert await claude_bot.send(dm(ts(2), "what does this error mean?")) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [turn] = request.messages
    assert turn["role"] == "user"
    assert [b["type"] for b in turn["content"]] == ["text", "image", "text"]
    assert turn["content"][0]["text"] == "alice: [screenshot.png]"
    assert base64.b64decode(turn["content"][1]["source"]["data"]) == screenshot
    assert turn["content"][2]["text"] == "alice: what does this error mean?"
    assert api.downloads == ["F1"] and api.refused_downloads == []
    assert len(api.posts()) == 1
    print("\nrecorded request shape:", shape(request))


async def test_an_image_dm_is_one_image_block_with_the_exact_bytes(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    image = png(3, 2)
    file = api.share_file("F1", "chart.png", image, "image/png")
    assert await claude_bot.send(shared(1, "look", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [block] = files_of(request, "image")
    assert block["source"] == {"type": "base64", "media_type": "image/png",
                               "data": base64.b64encode(image).decode()}  # fmt: skip
    assert files_of(request, "document") == []
    assert api.downloads == ["F1"]


async def test_a_pdf_is_one_document_block(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    file = api.share_file("F2", "report.pdf", PDF, "application/pdf")
    assert await claude_bot.send(shared(1, "summarise", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [block] = files_of(request, "document")
    assert block["title"] == "report.pdf"
    assert block["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(block["source"]["data"]) == PDF
    assert files_of(request, "image") == []


async def test_a_csv_is_a_plain_text_document(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    file = api.share_file("F3", "errors.csv", CSV, "text/csv")
    assert await claude_bot.send(shared(1, "which service?", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [block] = files_of(request, "document")
    assert block["source"] == {"type": "text", "media_type": "text/plain", "data": CSV.decode()}
    assert block["title"] == "errors.csv"


async def test_a_200_mb_file_is_a_note_and_never_downloaded(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    file = api.share_file("F4", "dump.pdf", PDF, "application/pdf", size=200 * 1024 * 1024)
    assert await claude_bot.send(shared(1, "can you read this?", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    assert files_of(request, "document") == [] and files_of(request, "image") == []
    assert "[file dump.pdf (application/pdf, 200 MB) not included: larger than the 5 MB limit]" in (
        text_of(request)
    )
    assert api.downloads == [] and api.refused_downloads == []
    assert len(api.posts()) == 1


async def test_a_failed_download_is_a_note_and_the_burst_is_answered_once(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    file = api.share_file("F5", "gone.png", png(2, 2), "image/png")
    del api.files["F5"]  # deleted before we fetched it: Slack answers 404
    assert await claude_bot.send(shared(1, "what about this", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    size = len(png(2, 2))
    note = f"[file gone.png (image/png, {size} bytes) not included: download failed (HTTP 404)]"
    assert text_of(request) == f"alice: what about this\n{note}"
    assert files_of(request, "image") == []
    assert len(api.posts()) == 1
    await claude_bot.step(30.0)  # nothing is retried: the outcome is remembered
    assert api.downloads == ["F5"] and len(server.requests) == 1 and len(api.posts()) == 1


async def test_the_ack_of_five_files_comes_before_any_download(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    files = [api.share_file(f"F{n}", f"shot{n}.png", png(n, n), "image/png") for n in range(1, 6)]
    assert await claude_bot.send(shared(1, "five screenshots", *files)) == 200
    api.timeline.append("ack")
    await claude_bot.step(1.5)
    assert api.timeline == ["ack", *[f"download F{n}" for n in range(1, 6)]]
    [request] = server.requests
    assert [base64.b64decode(b["source"]["data"]) for b in files_of(request, "image")] == [
        png(n, n) for n in range(1, 6)
    ]


async def test_history_shows_a_file_again_without_a_second_download(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    image = png(5, 5)
    file = api.share_file("F1", "chart.png", image, "image/png")
    assert await claude_bot.send(shared(1, "look", file)) == 200
    await claude_bot.step(1.5)
    assert await claude_bot.send(dm(ts(2), "and the trend?")) == 200
    await claude_bot.step(1.5)
    _, second = server.requests
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    [block] = files_of(second, "image")
    assert base64.b64decode(block["source"]["data"]) == image
    assert api.downloads == ["F1"]


async def test_an_edit_that_adds_a_file_is_an_edit(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    assert await claude_bot.send(dm(ts(1), "see attached")) == 200
    file = api.share_file("F7", "trace.txt", b"Traceback: boom\n", "text/plain")
    before = {"type": "message", "user": "U1", "text": "see attached", "ts": ts(1)}
    changed = {"type": "message", "subtype": "message_changed", "channel": "D1",
               "channel_type": "im", "ts": ts(2), "hidden": True,
               "message": {**before, "files": [file]}, "previous_message": before}  # fmt: skip
    assert await claude_bot.send(changed) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [block] = files_of(request, "document")
    assert block["source"]["data"] == "Traceback: boom\n"
    assert len(api.posts()) == 1


async def test_without_the_bot_token_slack_gives_a_sign_in_page_not_the_file(
    api: FakeSlackApi, server: FakeAnthropic
) -> None:
    """The fake checks the bearer token: a front end holding another token gets a note."""
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0}
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV)
    async with running_bot(api, replier=replier) as bot:  # type: ignore[arg-type]
        bot.frontend.only.client.token = TOKEN + "-other"  # its posts fail too: unread here
        file = api.share_file("F8", "x.png", png(2, 2), "image/png")
        assert await bot.send(shared(1, "hm", file)) == 200
        await bot.step(1.5)
    await replier.aclose()
    [request] = server.requests
    assert "not included: download failed (got a web page instead of the file)" in text_of(request)
    assert api.refused_downloads == ["F8"] and api.downloads == []


async def test_a_file_deleted_before_the_answer_drops_out_with_the_edit(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    """Slack turns a deleted file into a tombstone in a `message_changed`: an edit that
    removes the file, so nothing is downloaded for it."""
    file = api.share_file("F9", "oops.png", png(2, 2), "image/png")
    first = {"type": "message", "user": "U1", "text": "see", "ts": ts(1), "files": [file]}
    assert await claude_bot.send(shared(1, "see", file)) == 200
    tombstone = {"id": "F9", "mode": "tombstone"}
    changed = {"type": "message", "subtype": "message_changed", "channel": "D1",
               "channel_type": "im", "ts": ts(2), "hidden": True,
               "message": {**first, "files": [tombstone]}, "previous_message": first}  # fmt: skip
    assert await claude_bot.send(changed) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    assert text_of(request) == "alice: see" and api.downloads == []


async def test_a_shared_web_page_is_read_as_text_not_taken_for_the_sign_in_page(
    api: FakeSlackApi, server: FakeAnthropic, claude_bot: Bot
) -> None:
    page = b"<html><body>500 Internal Server Error</body></html>"
    file = api.share_file("F10", "error.html", page, "text/html")
    assert await claude_bot.send(shared(1, "what broke?", file)) == 200
    await claude_bot.step(1.5)
    [request] = server.requests
    [block] = files_of(request, "document")
    assert block["source"]["data"] == page.decode()
