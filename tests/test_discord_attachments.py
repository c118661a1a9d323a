"""Discord attachments over the wire: real discord.py parses gateway payloads from the fake
Discord, whose CDN serves the files (signed links, no token); the real engine and SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.app import App
from bot.core.events import ConversationKey
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_discord import FakeDiscord, frontend_for
from tests.discord_harness import engine_config
from tests.test_discord_wire import ALICE, DM_ID, eventually

KEY = ConversationKey("discord", "dm", str(DM_ID))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    return fake_discord


@pytest.fixture
async def running(
    fake: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> AsyncIterator[tuple[App, ScriptedReplier]]:
    front = frontend_for(fake, clock)
    replier = ScriptedReplier()
    app = App(engine_config(), store, replier, [front], clock=clock, owner="w1")
    await front.start(app)
    yield app, replier
    await shut_down(app.engine)
    await front.stop()


async def stored_version(store: SqliteStore, version: int) -> None:
    async def reached() -> bool:
        state = await store.conversation_state(KEY.id)
        return state is not None and state.version == version

    await eventually(reached)


async def answer(app: App, clock: FakeClock) -> None:
    await clock.advance(1.5)
    await app.engine.run_due()
    await app.engine.idle()


async def test_an_attachment_is_fetched_from_the_cdn_when_the_burst_is_answered(
    fake: FakeDiscord, running: tuple[App, ScriptedReplier], store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = running
    shot = fake.upload(DM_ID, "shot.png", PNG, "image/png", width=8, height=8)
    notes = fake.upload(DM_ID, "notes.md", b"# todo\n- ship it\n", None)  # no content type
    await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "", attachments=[shot, notes]))
    await stored_version(store, 1)
    [message] = await store.pending_messages(KEY.id, 0, 1)
    assert [(a.name, a.mime_type, a.width) for a in message.attachments] == [
        ("shot.png", "image/png", 8),
        ("notes.md", "", 0),
    ]
    assert fake.cdn_downloads == []  # stored and acknowledged: nothing fetched yet
    await answer(app, clock)
    [call] = replier.calls
    [burst] = call.prompt.burst
    assert [(f.kind, f.media_type, f.content) for f in burst.files] == [
        ("image", "image/png", PNG),
        ("text", "text/plain", b"# todo\n- ship it\n"),
    ]
    assert fake.cdn_downloads == [shot["id"], notes["id"]]
    assert len(fake.created) == 1


async def test_a_gone_cdn_file_is_a_note_and_an_edit_removing_a_file_is_an_edit(
    fake: FakeDiscord, running: tuple[App, ScriptedReplier], store: SqliteStore, clock: FakeClock
) -> None:
    app, replier = running
    gone = fake.upload(DM_ID, "gone.png", PNG, "image/png")
    kept = fake.upload(DM_ID, "kept.png", PNG, "image/png")
    del fake.uploads[gone["id"]]
    data = fake.message(DM_ID, ALICE, "two shots", attachments=[gone, kept])
    await fake.dispatch("MESSAGE_CREATE", data)
    await stored_version(store, 1)
    edited = {**data, "attachments": [kept], "edited_timestamp": data["timestamp"]}
    await fake.dispatch("MESSAGE_UPDATE", edited)
    await stored_version(store, 2)
    await answer(app, clock)
    [call] = replier.calls
    [burst] = call.prompt.burst
    assert [f.attachment.name for f in burst.files] == ["kept.png"]
    assert fake.cdn_downloads == [kept["id"]]

    late = fake.upload(DM_ID, "late.png", PNG, "image/png")
    del fake.uploads[late["id"]]
    await fake.dispatch("MESSAGE_CREATE", fake.message(DM_ID, ALICE, "and", attachments=[late]))
    await stored_version(store, 3)
    await answer(app, clock)
    assert replier.calls[1].prompt.burst_text() == (
        "Alice: and\n[file late.png (image/png, 72 bytes) not included: download failed (HTTP 404)]"
    )
    assert len(fake.created) == 2
