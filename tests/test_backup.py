"""`burstbot backup`: an online copy of the SQLite database while another process writes, the
documented restore (a copy back, private to its owner), and the same `status` from the copy."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sqlite import MIGRATIONS, SqliteStore
from tests.test_cli import ROOT, burstbot

T = Timing(quiet_seconds=60.0, max_wait_seconds=600.0)


def config_for(database: Path) -> Path:
    config = database.parent / "config.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{database}"\n[llm]\nprovider = "offline"\n')
    return config


def conversations_consistent(path: Path) -> tuple[int, int]:
    """Every conversation's version counts its messages: no transaction is half in the copy."""
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute(
            "SELECT c.version, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) "
            "FROM conversations c"
        ).fetchall()
        for version, messages in rows:
            assert version == messages
        return len(rows), sum(messages for _, messages in rows)


async def test_a_backup_taken_while_another_process_writes_is_consistent_and_private(
    tmp_path: Path,
) -> None:
    database = tmp_path / "live" / "burstbot.db"
    database.parent.mkdir()
    store = SqliteStore(str(database))
    await store.open()
    config = config_for(database)
    written = 0
    backing_up = asyncio.Event()
    written_during_backup = 0

    async def write() -> None:
        nonlocal written, written_during_backup
        while True:
            key = ConversationKey("test", "w1", f"c{written % 7}")
            await store.ingest(IncomingMessage(key, f"m{written}", "u1", "alice", "x" * 200), 0, T)
            written += 1
            written_during_backup += backing_up.is_set()
            await asyncio.sleep(0)

    writer = asyncio.create_task(write())
    try:
        while written < 200:  # noqa: ASYNC110  (a bounded wait for the writer's own progress)
            await asyncio.sleep(0.01)
        target = tmp_path / "copy.db"
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "backup", str(target), "--config", str(config),
            cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        backing_up.set()
        out, err = await asyncio.wait_for(process.communicate(), 60)
        backing_up.clear()
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        await store.close()
    assert process.returncode == 0, err.decode()
    assert written_during_backup > 0  # the writer went on while the backup process ran
    conversations, messages = conversations_consistent(target)
    assert conversations == 7 and 200 <= messages <= written
    [line] = out.decode().splitlines()
    assert line.startswith(f"backup: {database} -> {target} (")
    assert f"schema version {len(MIGRATIONS)}, 7 conversations, {messages} messages" in line
    assert line.endswith("integrity ok; mode 0600)")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["copy.db", "live"]  # no -wal beside it


def normalized(status: str) -> str:
    """`status` with its relative times ("3.0s ago") blanked: they move between two runs."""
    return re.sub(r"(in )?\d+\.\ds( ago)?", "<t>", status)


async def test_restore_into_a_new_directory_shows_the_same_status(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    assert burstbot(["run"], live, stdin="a\nb\n").returncode == 0  # terminal chat, ./burstbot.db
    assert burstbot(["run"], live, stdin="c\n").returncode == 0
    config = config_for(live / "burstbot.db")
    backup = burstbot(["backup", str(tmp_path / "b.db"), "--config", str(config)], tmp_path)
    assert backup.returncode == 0, backup.stderr
    restored = tmp_path / "restored"  # the documented restore: a private copy, then its config
    restored.mkdir()
    shutil.copyfile(tmp_path / "b.db", restored / "burstbot.db")
    os.chmod(restored / "burstbot.db", 0o600)
    before = burstbot(["status", "--config", str(config)], tmp_path)
    after = burstbot(["status", "--config", str(config_for(restored / "burstbot.db"))], tmp_path)
    assert before.returncode == after.returncode == 0, after.stderr
    assert "console/local/terminal/  3/3" in after.stdout
    assert normalized(after.stdout) == normalized(before.stdout)
    explain = burstbot(
        [
            "explain",
            "console/local/terminal/",
            "--config",
            str(config_for(restored / "burstbot.db")),
        ],
        tmp_path,
    )
    assert "received  #3 you: c" in explain.stdout


def test_a_backup_never_overwrites_and_never_creates_an_empty_database(tmp_path: Path) -> None:
    config = config_for(tmp_path / "burstbot.db")
    missing = burstbot(["backup", "b.db", "--config", str(config)], tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"burstbot: config error: storage.url: no database at {tmp_path / 'burstbot.db'} "
        "(run `burstbot migrate`)"
    )
    assert not (tmp_path / "burstbot.db").exists()
    assert burstbot(["migrate", "--config", str(config)], tmp_path).returncode == 0
    (tmp_path / "b.db").write_text("keep me")
    refused = burstbot(["backup", "b.db", "--config", str(config)], tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "burstbot: backup: b.db exists; a backup never overwrites, pick a new name"
    )
    assert (tmp_path / "b.db").read_text() == "keep me"


def test_on_postgresql_it_prints_the_pg_dump_command_without_the_password(
    tmp_path: Path,
) -> None:
    config = tmp_path / "pg.toml"
    url = "postgresql://bot:s3cret-pw@db.internal:5433/burstbot?search_path=chat&sslmode=require"
    config.write_text(f'[storage]\nurl = "{url}"\n')
    result = burstbot(["backup", "/backups/burstbot.dump", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr
    dsn = "'postgresql://bot@db.internal:5433/burstbot?sslmode=require'"
    assert (
        f"  pg_dump --format=custom --schema=chat --file=/backups/burstbot.dump {dsn}"
        in result.stdout.splitlines()
    )


def test_operator_commands_run_elsewhere_say_the_database_path_is_relative(
    tmp_path: Path,
) -> None:
    """Run from another directory, a relative `sqlite:///burstbot.db` misses the bot's database:
    the error says why instead of suggesting `migrate` (which would create an empty one)."""
    config = tmp_path / "c.toml"
    config.write_text('[storage]\nurl = "sqlite:///burstbot.db"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = burstbot(["status", "--config", str(config)], elsewhere)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert f"no database at burstbot.db in {elsewhere}: the path is relative" in line
    assert not (elsewhere / "burstbot.db").exists()
