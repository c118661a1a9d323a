"""The command line as a user meets it: terminal chat with no keys, clear config errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def burstbot(args: list[str], cwd: Path, stdin: str = "", env: dict[str, str] | None = None):
    environ = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


def test_piped_lines_get_exactly_one_reply_quoting_all(tmp_path: Path) -> None:
    result = burstbot(["run"], tmp_path, stdin="a\nb\nc\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("burstbot:") == 1
    assert "> you: a\n> you: b\n> you: c" in result.stdout
    assert (tmp_path / "burstbot.db").exists()
    assert "offline replier" in result.stderr


def test_a_local_file_attached_in_the_terminal_is_read_by_the_offline_replier(
    tmp_path: Path,
) -> None:
    (tmp_path / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (tmp_path / "app.zip").write_bytes(b"PK\x03\x04")
    typed = "/attach shot.png\n/attach missing.png\n/attach app.zip\nwhat does this error mean?\n"
    result = burstbot(["run"], tmp_path, stdin=typed)
    assert result.returncode == 0, result.stderr
    assert "(no such file: missing.png)" in result.stdout
    assert result.stdout.count("burstbot:") == 1
    assert (
        "> you: [shot.png]\n> [got image shot.png: 108 bytes]\n> you: [app.zip]\n"
        "> [file app.zip (application/zip, 4 bytes) not included: unsupported file type]\n"
        "> you: what does this error mean?"
    ) in result.stdout


def test_second_run_continues_the_same_database(tmp_path: Path) -> None:
    burstbot(["run"], tmp_path, stdin="first\n")
    result = burstbot(["run"], tmp_path, stdin="second\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("burstbot:") == 1
    assert "second" in result.stdout and "first" not in result.stdout


def test_mistyped_key_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[debounce]\nquiet_secnds = 2\n")
    result = burstbot(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "burstbot: config error: debounce.quiet_secnds: unknown key"
    ]


def test_wrong_type_and_missing_secret_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[lease]\nttl_seconds = "soon"\n')
    result = burstbot(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2 and "lease.ttl_seconds" in result.stderr
    assert "Traceback" not in result.stderr
    config.write_text('[llm]\nprovider = "anthropic"\napi_key_env = "NO_SUCH_KEY_VAR"\n')
    result = burstbot(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2 and "NO_SUCH_KEY_VAR" in result.stderr


def test_broken_toml_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[debounce\n")
    result = burstbot(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_example_config_parses() -> None:
    from bot.config import Config, load_config

    config = load_config(ROOT / "config.example.toml")
    assert config.debounce.quiet_seconds == 1.5 and config.slack.http_path == "/slack/events"
    defaults = Config()
    for section in ("limits", "retention", "storage", "engine", "catch_up"):  # shown as they are
        assert getattr(config, section) == getattr(defaults, section), section


def test_workers_refuse_front_ends_that_keep_one_connection(tmp_path: Path) -> None:
    """Only Slack's HTTP endpoint can be shared by several processes; the rest is refused."""
    postgres = '[storage]\nurl = "postgresql://bot@127.0.0.1:9/bot"\n'
    socket_mode = '[console]\nenabled = false\n[slack]\nenabled = true\nmode = "socket"\n'
    discord = "[console]\nenabled = false\n[discord]\nenabled = true\n"
    http_and_console = '[slack]\nenabled = true\nmode = "http"\n'
    for text in (socket_mode, discord, http_and_console):
        config = tmp_path / "c.toml"
        config.write_text(postgres + text)
        result = burstbot(["run", "--config", str(config), "--workers", "2"], tmp_path)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("burstbot: config error: --workers 2: several processes can ")
        assert "Socket Mode, Discord and the terminal keep one connection" in line
    result = burstbot(["run", "--workers", "0"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "burstbot: config error: --workers must be at least 1"


def test_workers_on_sqlite_point_to_postgresql(tmp_path: Path) -> None:
    """SQLite is for one process: `--workers N` on it is refused in one line, before anything
    starts, whatever the front ends (the default config's terminal included)."""
    http_only = '[console]\nenabled = false\n[slack]\nenabled = true\nmode = "http"\n'
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "bot.db"}"\n{http_only}')
    for args in (["--config", str(config)], []):
        result = burstbot(["run", *args, "--workers", "2"], tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == (
            "burstbot: config error: --workers 2: several processes need PostgreSQL; SQLite is "
            'for one process (set [storage] url = "postgresql://...", or run with --workers 1)'
        )
    assert not (tmp_path / "bot.db").exists() and not (tmp_path / "burstbot.db").exists()
