"""One deployment, many workspaces: "Add to Slack" installs, each workspace's calls with its own
token, events of a workspace not installed acked and dropped, a denied or replayed install told
in one line, a wrong key refused at start (the fake grid: testkit/fake_slack_grid.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from bot.core.errors import ConfigError
from bot.core.events import ConversationKey
from testkit.clock import FakeClock
from testkit.fake_slack import Failure
from testkit.fake_slack_grid import FakeSlackGrid
from testkit.replier import ScriptedReplier
from tests.on_disk import holding
from tests.slack_oauth_harness import (
    CLIENT_ID,
    CLIENT_SECRET,
    approve,
    grid,
    install,
    land,
    oauth_bot,
    oauth_env,
)

__all__ = ["grid", "oauth_env"]


def answered(grid: FakeSlackGrid, team: str) -> list[str]:
    return [m.text for m in grid.workspaces[team].posts()]


@pytest.mark.usefixtures("oauth_env")
async def test_each_installed_workspace_is_answered_with_its_own_token(
    grid: FakeSlackGrid, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "burstbot.slack")
    async with oauth_bot(grid) as bot:
        assert await install(bot.frontend, "T1") == (200, "burstbot is installed in Acme. "
                                                     "Open Slack and send it a direct message "
                                                     "to start.")  # fmt: skip
        status, outcome = await install(bot.frontend, "T2")
        assert status == 200 and "installed in Globex" in outcome
        await grid.say("T1", "D1", "hello from acme")
        await grid.say("T2", "D2", "hello from globex")
        await bot.step(1.5)
        assert answered(grid, "T1") == ["reply to: hello from acme"]
        assert answered(grid, "T2") == ["reply to: hello from globex"]
        assert grid.cross_team == []  # no call carried another workspace's token
        prompts = sorted((c.texts, c.prompt.history) for c in bot.replier.calls)
        assert prompts == [(["hello from acme"], ()), (["hello from globex"], ())]
        # an event from a workspace that never installed the app: acked, dropped, one line
        _, status = await grid.say("T3", "D3", "anyone?")
        assert status == 200
        assert await bot.store.conversation_state(ConversationKey("slack", "T3", "D3").id) is None
    dropped = [r for r in caplog.records if "T3, which is not installed" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.usefixtures("oauth_env")
async def test_a_cancelled_or_replayed_install_is_one_line_and_installs_nothing(
    grid: FakeSlackGrid, caplog: pytest.LogCaptureFixture
) -> None:
    async with oauth_bot(grid) as bot:
        status, outcome = await install(bot.frontend, "T1", decision="cancel")
        assert (status, outcome) == (200, "The install was cancelled on Slack's page")
        assert await bot.store.installations() == []
        back, cookie = await approve(bot.frontend, "T1", "allow")
        assert (await land(back, cookie))[0] == 200
        status, outcome = await land(back, cookie)  # the same redirect again: its state is spent
        assert status == 401 and outcome.startswith("The install link expired or was used")
        status, outcome = await land(back, "slack-app-oauth-state=forged")
        assert status == 400 and "another browser" in outcome
        assert [r.team_id for r in await bot.store.installations()] == ["T1"]
    failures = [r.getMessage() for r in caplog.records if "install failed" in r.getMessage()]
    assert len(failures) == 3
    assert failures[0] == "slack: an install failed: the install was cancelled on Slack's page"


@pytest.mark.usefixtures("oauth_env")
async def test_the_wrong_key_for_the_stored_tokens_stops_the_start_with_one_line(
    grid: FakeSlackGrid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "bot.db")
    async with oauth_bot(grid, db=db) as bot:
        await install(bot.frontend, "T1")
    monkeypatch.setenv("BURSTBOT_TOKEN_KEY", Fernet.generate_key().decode())
    with pytest.raises(ConfigError, match=r"^slack.token_key_env: the key does not decrypt"):
        async with oauth_bot(grid, db=db):
            pass


@pytest.mark.usefixtures("oauth_env")
async def test_an_uninstall_mid_conversation_deletes_its_tokens_fails_its_reply_and_erases_it(
    grid: FakeSlackGrid, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "bot.db"
    async with oauth_bot(grid, db=str(db)) as bot:
        for team in ("T1", "T3"):
            await install(bot.frontend, team)
        grid.workspaces["T3"].fail("chat.postMessage", Failure(status=500), times=100)
        await grid.say("T1", "D1", "acme asks")
        await grid.say("T3", "D3", "initech asks")
        await bot.step(1.5)  # T3's reply is committed; its post failed and waits to be retried
        t3 = ConversationKey("slack", "T3", "D3").id
        assert [r.state for r in await bot.store.replies(t3)] == ["pending"]
        assert await grid.uninstall("T3") == [200, 200]
        assert await bot.store.installation("T3") is None
        [reply] = await bot.store.replies(t3)
        assert reply.state == "failed"
        assert reply.last_error == "slack: workspace_not_installed (T3, tokens_revoked)"
        assert [m.text for m in await bot.store.messages(t3)] == [""]  # erased
        assert answered(grid, "T1") == ["reply to: acme asks"]
        await grid.say("T1", "D1", "still there?")
        _, status = await grid.say("T3", "D3", "hello again")
        assert status == 200
        await bot.step(1.5)
        assert answered(grid, "T1") == ["reply to: acme asks", "reply to: still there?"]
        assert len(await bot.store.messages(t3)) == 1  # nothing new stored for T3
    lines = [r.getMessage() for r in caplog.records if r.name == "burstbot.slack"]
    revoked = "slack: tokens_revoked in workspace T3: tokens deleted, 1 pending replies failed"
    assert revoked in lines
    erased = [line for line in lines if line.startswith("slack: app_uninstalled in workspace T3")]
    assert erased == [
        "slack: app_uninstalled in workspace T3: tokens already deleted, 0 pending replies "
        "failed; erased 1 conversations, 1 messages, 1 replies, 0 held, 0 generations, "
        "0 actions, 0 votes, 0 clicks, 0 files, 0 unsent replies kept"
    ]
    dropped = [line for line in lines if "T3, which is not installed" in line]
    assert len(dropped) == 1
    files = sorted(tmp_path.iterdir())  # noqa: ASYNC240 (the database file and its WAL)
    raw = b"".join(p.read_bytes() for p in files)
    assert b"Acme" in raw and b"xoxb-" not in raw  # T1, still installed, has its token sealed


@pytest.mark.usefixtures("oauth_env")
async def test_an_answer_being_generated_at_an_uninstall_is_never_stored(
    grid: FakeSlackGrid, tmp_path: Path
) -> None:
    db = tmp_path / "bot.db"
    async with oauth_bot(grid, db=str(db), replier=ScriptedReplier(hold=True)) as bot:
        await install(bot.frontend, "T3")
        await grid.say("T3", "D3", "my pin is PIN-7777")
        await bot.clock.advance(1.5)
        await bot.app.engine.run_due()  # the generation starts and waits for the test
        call = await bot.replier.next_call(0)
        assert await grid.uninstall("T3") == [200, 200]
        call.finish("you said PIN-7777")  # the model answers after the erase
        await bot.step(1.0)
        t3 = ConversationKey("slack", "T3", "D3").id
        assert await bot.store.replies(t3) == []
        assert [m.text for m in await bot.store.messages(t3)] == [""]
        await bot.step(30.0)
        assert len(bot.replier.calls) == 1  # nothing is generated again for the erased input
    raw = b"".join(p.read_bytes() for p in sorted(tmp_path.iterdir()))  # noqa: ASYNC240
    assert b"PIN-7777" not in raw
    assert answered(grid, "T3") == []


@pytest.mark.usefixtures("oauth_env")
async def test_an_expiring_token_is_refreshed_once_by_one_of_two_processes(
    tmp_path: Path,
) -> None:
    clock = FakeClock(time.time())
    grid = FakeSlackGrid(CLIENT_ID, CLIENT_SECRET, token_lifetime=60, clock=clock.now)
    grid.add_workspace("T1", "Acme")
    await grid.start()
    db = str(tmp_path / "bot.db")
    try:
        async with oauth_bot(grid, db=db, clock=clock, owner="a") as a:
            await install(a.frontend, "T1")
            async with oauth_bot(grid, db=db, clock=clock, owner="b") as b:
                grid.events_url = a.sender.url  # both listen; events go to a
                assert a.frontend.workspaces is not None and b.frontend.workspaces is not None
                await b.frontend.workspaces.get("T1")  # b holds the first token too
                await clock.advance(50)  # within the last quarter of the token's minute
                await asyncio.gather(
                    a.frontend.workspaces.get("T1"), b.frontend.workspaces.get("T1")
                )
                assert grid.refreshes == {"T1": 1} and grid.refused_refreshes == []
                await clock.advance(15)  # the first token has expired
                again = [await w.get("T1") for w in (a.frontend.workspaces, b.frontend.workspaces)]
                tokens = {w.client.token for w in again if w is not None}
                assert tokens == {grid.workspaces["T1"].token}  # both use the new one
                await grid.say("T1", "D1", "still answered?")
                await a.step(1.5)
                assert answered(grid, "T1") == ["reply to: still answered?"]
                assert grid.refreshes == {"T1": 1}
    finally:
        await grid.stop()


@pytest.mark.usefixtures("oauth_env")
async def test_an_uninstall_leaves_none_of_the_workspaces_text_on_disk_while_the_bot_runs(
    grid: FakeSlackGrid, tmp_path: Path
) -> None:
    """Read from the database file, its write-ahead log and its shared memory while the store
    is still open: a clean stop would fold the log back and hide what a crash leaves."""
    db = tmp_path / "bot.db"
    async with oauth_bot(grid, db=str(db)) as bot:
        for team in ("T1", "T3"):
            await install(bot.frontend, team)
        await grid.say("T1", "D1", "acme keeps kept-marker-71c4")
        await grid.say("T3", "D3", "initech says erased-marker-9e2b")
        await bot.step(1.5)
        assert answered(grid, "T3") == ["reply to: initech says erased-marker-9e2b"]
        assert holding(db, "erased-marker-9e2b") != []  # stored, and the bytes are readable
        assert await grid.uninstall("T3") == [200, 200]
        t3 = ConversationKey("slack", "T3", "D3").id
        assert [m.text for m in await bot.store.messages(t3)] == [""]  # erased, not yet closed
        assert holding(db, "erased-marker-9e2b") == []
        assert holding(db, "kept-marker-71c4") != []  # the other workspace's text is still there
