"""Reloading the config of a running process: SIGHUP, `burstbot reload`, what applies and what
waits for a restart, and a broken file that changes nothing."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app import App
from bot.cli.main import main
from bot.config import load_config
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import post_outbox
from tests.conftest import message
from tests.test_exit_paths import environment
from tests.test_lifecycle import eventually

BASE = """
[storage]
url = "sqlite:///{db}"
[llm]
provider = "offline"
system_prompt = "{prompt}"
[console]
enabled = false
[debounce]
adaptive = false
speculate = false
quiet_seconds = {quiet}
max_wait_seconds = 8.0
"""


def write(path: Path, quiet: float = 1.5, prompt: str = "be brief", db: str = "a.db") -> Path:
    path.write_text(BASE.format(quiet=quiet, prompt=prompt, db=db), encoding="utf-8")
    return path


async def reply_count_after(
    app: App, clock: FakeClock, frontend: RecordingFrontend, seconds: float
) -> int:
    await clock.advance(seconds)
    await app.engine.run_due()
    await app.engine.idle()
    return len(frontend.posts)


def app_for(path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend) -> App:
    app = App(load_config(path), store, ScriptedReplier(), [frontend], clock=clock)
    app.config_path = path
    return app


async def test_a_changed_quiet_window_applies_to_the_next_burst(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    path = write(tmp_path / "c.toml", quiet=1.5)
    app = app_for(path, store, clock, frontend)
    await app.ingest(message(1))
    assert await reply_count_after(app, clock, frontend, 0.5) == 0  # 1.5 s window still open
    assert await reply_count_after(app, clock, frontend, 1.0) == 1
    write(path, quiet=0.5)
    plan = app.reload()
    assert plan is not None and plan.applied == ("debounce.quiet_seconds",)
    await app.ingest(message(2))
    assert await reply_count_after(app, clock, frontend, 0.5) == 2  # the new 0.5 s window
    assert app.config.debounce.quiet_seconds == 0.5


async def test_sighup_reloads_a_running_process(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The real signal, delivered to `App.run`'s handler (never the default: it would kill)."""
    path = write(tmp_path / "c.toml", quiet=1.5, prompt="first")
    app = app_for(path, store, clock, frontend)
    reloaded = asyncio.Event()
    app.subscribe(lambda name, _fields: reloaded.set() if name == "reloaded" else None)
    running = asyncio.create_task(app.run())
    await eventually(lambda: frontend.host is not None)  # every signal handler is installed
    write(path, quiet=0.25, prompt="second")
    os.kill(os.getpid(), signal.SIGHUP)
    await asyncio.wait_for(reloaded.wait(), 5)
    assert app.engine.settings.quiet_seconds == 0.25
    assert app.engine.settings.system_prompt == "second"
    app.request_stop()
    await asyncio.wait_for(running, 10)


async def test_a_broken_file_is_refused_and_the_running_config_stays(
    tmp_path: Path,
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = write(tmp_path / "c.toml", quiet=1.5)
    app = app_for(path, store, clock, frontend)
    before = app.config
    path.write_text(path.read_text().replace("quiet_seconds", "quiet_secnds"), encoding="utf-8")
    with caplog.at_level(logging.ERROR, "burstbot"):
        assert app.reload() is None
    assert app.config is before and app.engine.settings.quiet_seconds == 1.5
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line == ("reload refused, the running config stays: debounce.quiet_secnds: unknown key")
    await app.ingest(message(1))
    assert await reply_count_after(app, clock, frontend, 1.0) == 0  # still the 1.5 s window
    assert await reply_count_after(app, clock, frontend, 0.5) == 1


async def test_restart_only_settings_keep_their_running_value_and_are_named(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    path = write(tmp_path / "c.toml", quiet=1.5, db="a.db")
    app = app_for(path, store, clock, frontend)
    write(path, quiet=1.0, db="b.db")
    text = path.read_text() + "[metrics]\nport = 9999\n[slack]\nhttp_port = 4000\n"
    path.write_text(text.replace('provider = "offline"', 'provider = "anthropic"'))
    plan = app.reload()
    assert plan is not None
    assert plan.applied == ("debounce.quiet_seconds",)
    assert set(plan.needs_restart) == {
        "storage.url", "llm.provider", "metrics.port", "slack.http_port"
    }  # fmt: skip
    assert app.config.storage.url == "sqlite:///a.db"
    assert app.config.llm.provider == "offline" and app.config.metrics.port == 9464
    assert app.engine.settings.quiet_seconds == 1.0


async def test_changed_attachment_limits_reach_the_file_loader(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    path = write(tmp_path / "c.toml")
    app = app_for(path, store, clock, frontend)
    path.write_text(path.read_text() + "[attachments]\nmax_per_message = 2\n")
    plan = app.reload()
    assert plan is not None and plan.applied == ("attachments.max_per_message",)
    assert app.engine.prompts.files.limits.max_per_message == 2


async def test_the_cut_note_is_the_model_clients_and_waits_for_a_restart(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    path = write(tmp_path / "c.toml")
    app = app_for(path, store, clock, frontend)
    path.write_text(path.read_text().replace("[llm]\n", '[llm]\ncut_note = "(cut)"\n'))
    plan = app.reload()
    assert plan is not None and plan.needs_restart == ("llm.cut_note",) and plan.applied == ()


async def test_limits_switched_on_by_a_reload_guard_the_next_burst(
    tmp_path: Path, store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    path = write(tmp_path / "c.toml")
    app = app_for(path, store, clock, frontend)
    await app.ingest(message(1))
    assert (await app.ingest(message(2))).status == "accepted"  # no rate limit yet
    path.write_text(path.read_text() + "[limits]\nuser_messages_per_window = 1\n")
    assert app.reload() is not None
    assert (await app.ingest(message(3))).status == "accepted"
    assert (await app.ingest(message(4))).status == "ignored"
    await post_outbox(app)
    assert frontend.texts() == [app.config.limits.rate_notice]


def test_reload_command_signals_the_process_named_by_the_pid_file(tmp_path: Path) -> None:
    """`burstbot run` writes engine.pid_file; `burstbot reload` reads it and sends SIGHUP; the
    running process logs what it applied. A broken file is refused by the command itself."""
    path = write(tmp_path / "c.toml", quiet=1.5, db=str(tmp_path / "bot.db"))
    pid_file = tmp_path / "burstbot.pid"
    text = path.read_text().replace("[console]\nenabled = false", "[console]\nenabled = true")
    path.write_text(text + f'[engine]\npid_file = "{pid_file}"\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "run", "--config", str(path), "-v"],
        cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, env=environment(),
    )  # fmt: skip
    assert process.stdin is not None and process.stderr is not None
    try:
        for line in process.stderr:
            if "burstbot running as" in line:
                break
        assert pid_file.read_text().strip() == str(process.pid)
        path.write_text(path.read_text().replace("quiet_seconds = 1.5", "quiet_seconds = 0.5"))
        assert main(["reload", "--config", str(path)]) == 0
        for line in process.stderr:
            if "config reloaded" in line:
                expected = f"config reloaded from {path}: debounce.quiet_seconds"
                assert line.rstrip().endswith(expected)
                break
        else:
            pytest.fail("the running process never logged the reload")
    finally:
        process.stdin.close()
        process.wait(timeout=10)
    assert not pid_file.exists()  # removed at exit
    path.write_text(path.read_text().replace("quiet_seconds", "quiet_secnds"))
    assert main(["reload", "--config", str(path)]) == 2  # refused before any signal is sent


def test_reload_without_a_pid_says_how_to_name_the_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "c.toml")
    assert main(["reload", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "burstbot: config error: reload: give --pid, or set engine.pid_file in the config"
    )
