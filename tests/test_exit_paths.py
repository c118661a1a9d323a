"""Every way `burstbot` fails ends the process: one line on stderr, the right exit code, no hang.

A store that failed half-way (opened, then refused) must still close its connection: aiosqlite
runs each connection on a worker thread that keeps the interpreter alive until it is closed. Each
test runs the real command line as a subprocess with a short timeout; a hang fails it.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.sqlite import MIGRATIONS

SCHEMA = len(MIGRATIONS)

ROOT = Path(__file__).resolve().parent.parent
EXIT_WITHIN_SECONDS = 10.0


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SLACK_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def burstbot(args: list[str], cwd: Path, stdin: str = "") -> tuple[int, list[str]]:
    """Exit code and stderr lines; a process still running after the limit fails the test."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd, input=stdin, capture_output=True, text=True,
        timeout=EXIT_WITHIN_SECONDS, env=environment(),
    )  # fmt: skip
    return result.returncode, result.stderr.strip().splitlines()


def write_config(tmp_path: Path, extra: str = "", storage: str = "") -> Path:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[storage]\nurl = "sqlite:///burstbot.db"\n{storage}[llm]\nprovider = "offline"\n{extra}'
    )
    return config


@pytest.mark.parametrize("command", ["migrate", "run", "status"])
def test_a_file_that_is_not_a_database(tmp_path: Path, command: str) -> None:
    (tmp_path / "burstbot.db").write_bytes(b"this is not a database, just some text\n" * 100)
    code, lines = burstbot([command, "--config", str(write_config(tmp_path))], tmp_path)
    assert (code, lines) == (
        1, ["burstbot: cannot open SQLite database 'burstbot.db': file is not a database"]
    )  # fmt: skip


@pytest.mark.parametrize("command", ["migrate", "run", "explain"])
def test_a_database_from_a_newer_burstbot(tmp_path: Path, command: str) -> None:
    with sqlite3.connect(tmp_path / "burstbot.db") as db:
        db.execute("PRAGMA user_version = 99")
    args = [command, "--config", str(write_config(tmp_path))]
    code, lines = burstbot([*args, "slack/T1/C1/"] if command == "explain" else args, tmp_path)
    assert (code, lines) == (
        1, [f"burstbot: database schema version 99 is newer than this burstbot ({SCHEMA}); upgrade "
            "burstbot"]
    )  # fmt: skip


def test_a_database_holding_another_apps_tables(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "burstbot.db") as db:
        db.execute("CREATE TABLE conversations (name TEXT, owner TEXT)")
    code, lines = burstbot(["migrate", "--config", str(write_config(tmp_path))], tmp_path)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("burstbot: cannot open SQLite database 'burstbot.db': ")


def test_a_metrics_port_already_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, f"[metrics]\nenabled = true\nport = {port}\n")
        code, lines = burstbot(["run", "--config", str(config)], tmp_path, stdin="hello\n")
    assert code == 2 and len(lines) == 1, lines
    expected = f"burstbot: config error: metrics: cannot listen on 127.0.0.1:{port} "
    assert lines[0].startswith(expected)


def test_a_store_error_during_shutdown(tmp_path: Path) -> None:
    """Another process holds the database's write lock when the bot is told to stop: releasing
    its leases fails after the busy timeout, the error is reported, and the process still exits.
    (A long poll interval keeps the scheduler asleep while the lock is held.)"""
    config = write_config(
        tmp_path,
        "[debounce]\nquiet_seconds = 0.2\nmax_wait_seconds = 1.0\n[engine]\npoll_seconds = 60.0\n",
        storage="busy_timeout_seconds = 0.3\n",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "run", "--config", str(config)],
        cwd=tmp_path, env=environment(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    locker = sqlite3.connect(tmp_path / "burstbot.db", isolation_level=None, timeout=5)
    try:
        process.stdin.write("hello\n")
        process.stdin.flush()
        assert process.stdout.readline().startswith("burstbot: Got your 1 message")
        deadline = time.monotonic() + EXIT_WITHIN_SECONDS
        sent = "SELECT count(*) FROM replies WHERE state = 'sent'"
        while locker.execute(sent).fetchone() != (1,):
            assert time.monotonic() < deadline, "the reply was never marked sent"
            time.sleep(0.02)
        time.sleep(0.5)  # the scheduler's round after the delivery ends; it sleeps for a minute
        locker.execute("BEGIN IMMEDIATE")  # held until the bot has exited
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=EXIT_WITHIN_SECONDS)  # well before the scheduler's next round
    finally:
        locker.close()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stderr is not None
    stderr = process.stderr.read()
    lines = stderr.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1, stderr
    assert lines[0].startswith("burstbot: ") and "database is locked" in lines[0]


def test_a_store_error_while_chatting_in_the_terminal(tmp_path: Path) -> None:
    """The terminal's message cannot be stored (another process took the write lock after the
    bot started): the session ends with one error line and exit 1, instead of a reader that
    died and a process that waits forever."""
    config = write_config(tmp_path, storage="busy_timeout_seconds = 0.3\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "run", "-v", "--config", str(config)],
        cwd=tmp_path, env=environment(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stderr is not None
    locker = sqlite3.connect(tmp_path / "burstbot.db", isolation_level=None, timeout=5)
    try:
        deadline = time.monotonic() + EXIT_WITHIN_SECONDS
        while "burstbot running as" not in process.stderr.readline():
            assert time.monotonic() < deadline and process.poll() is None
        locker.execute("BEGIN IMMEDIATE")  # held until the bot has exited
        process.stdin.write("hello\n")
        process.stdin.close()
        process.wait(timeout=EXIT_WITHIN_SECONDS)
    finally:
        locker.close()
        if process.poll() is None:
            process.kill()
            process.wait()
    last = process.stderr.read().strip().splitlines()[-1]
    assert process.returncode == 1, last
    assert last.startswith("burstbot: ") and "database is locked" in last
