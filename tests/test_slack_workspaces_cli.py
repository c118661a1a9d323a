"""The operator's view of several workspaces: `burstbot workspaces`, `status --workspace`,
`usage --workspace` and `forget --workspace`, run as commands against a prepared database."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.installations import InstallationRecord
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app, step
from tests.test_cli import burstbot

T1 = ConversationKey("slack", "T1", "D1")
T3 = ConversationKey("slack", "T3", "D3")


async def prepared(path: Path) -> None:
    store = SqliteStore(str(path))
    await store.open()
    now = time.time()
    try:
        for team, name in (("T1", "Acme"), ("T3", "Initech")):
            record = InstallationRecord(team, "", name, "A1", "UB", "BB", "chat:write", "U1",
                                        "sealed", None, None, now)  # fmt: skip
            await store.save_installation(record, now)
        clock = FakeClock(now)
        app = make_app(store, clock, ScriptedReplier(), RecordingFrontend())
        for n, key in enumerate((T1, T3, T3)):
            await app.ingest(IncomingMessage(key, f"m{n}", "U1", "alice", f"text {n}"))
        await step(app, clock)
    finally:
        await store.close()


def test_workspaces_status_usage_and_forget_by_workspace(tmp_path: Path) -> None:
    asyncio.run(prepared(tmp_path / "burstbot.db"))
    listed = burstbot(["workspaces"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, acme, initech, total = listed.stdout.strip().splitlines()
    assert header.split()[:3] == ["WORKSPACE", "ID", "INSTALLED"]
    assert acme.split()[:2] == ["Acme", "T1"] and initech.split()[:2] == ["Initech", "T3"]
    assert acme.split()[-3:] == ["never", "1", "18"]  # no expiry, 1 conversation, its tokens
    assert initech.split()[-2] == "1" and initech.split()[-1] != "18"  # its own tokens
    assert total == "2 workspaces installed"
    status = burstbot(["status", "--workspace", "T1"], tmp_path)
    assert T1.id in status.stdout and T3.id not in status.stdout
    assert status.stdout.splitlines()[0] == "workspace T1: installed (Acme)"
    usage = burstbot(["usage", "--workspace", "T3", "--by", "channel"], tmp_path)
    assert "D3" in usage.stdout and "D1" not in usage.stdout
    forgotten = burstbot(["forget", "--workspace", "T3"], tmp_path)
    assert forgotten.returncode == 0, forgotten.stderr
    assert forgotten.stdout.strip() == (
        "forget workspace slack/T3: erased 1 conversations, 2 messages, 0 replies, 0 held, "
        "0 generations, 0 actions, 0 votes, 0 clicks, 0 files, 1 unsent replies kept"
    )
    assert burstbot(["forget", "--workspace", "T%"], tmp_path).returncode == 2
    asyncio.run(uninstalled(tmp_path / "burstbot.db", "T3"))
    assert burstbot(["workspaces"], tmp_path).stdout.strip().splitlines()[-1] == (
        "1 workspace installed"
    )
    status = burstbot(["status", "--workspace", "T3"], tmp_path).stdout.splitlines()
    assert status[0] == "workspace T3: not installed (uninstalled, or never installed here)"


async def uninstalled(path: Path, team: str) -> None:
    store = SqliteStore(str(path))
    await store.open()
    try:
        assert await store.delete_installation(team)
    finally:
        await store.close()
