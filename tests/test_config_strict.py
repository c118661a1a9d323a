"""Config is strict: values keep their TOML type, numbers are finite and bounded, and each mistake
is one line naming the key; a storage URL is never echoed past its scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_config, parse_config
from bot.core.errors import ConfigError


def load(tmp_path: Path, toml: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    load_config(path)


@pytest.mark.parametrize(
    ("toml", "key", "why"),
    [
        ('[slack]\nenabled = "yes"', "slack.enabled", "valid boolean"),
        ("[console]\nenabled = 1", "console.enabled", "valid boolean"),
        ('[debounce]\nquiet_seconds = "0.5"', "debounce.quiet_seconds", "valid number"),
        ("[debounce]\nquiet_seconds = true", "debounce.quiet_seconds", "valid number"),
        ('[engine]\nmax_concurrent_generations = "8"', "engine.max_concurrent_generations",
         "valid integer"),
        ("[engine]\nmax_concurrent_generations = 8.0", "engine.max_concurrent_generations",
         "valid integer"),
        ("[llm]\nmax_tokens = 1.5", "llm.max_tokens", "valid integer"),
        ("[storage]\nurl = 5", "storage.url", "valid string"),
        ('[access]\nallow_users = "U1"', "access.allow_users", "valid list"),
        ("[discord]\nlisten_channels = [123]", "discord.listen_channels.0", "valid string"),
        ("[lease]\nttl_seconds = inf", "lease.ttl_seconds", "finite number"),
        ("[lease]\nttl_seconds = nan", "lease.ttl_seconds", "finite number"),
        ("[debounce]\nmax_wait_seconds = 1e308", "debounce.max_wait_seconds", "less than"),
        ("[engine]\npoll_seconds = 99999999999999999999", "engine.poll_seconds", "less than"),
        ("[llm]\ntimeout_seconds = -inf", "llm.timeout_seconds", "finite number"),
        ("[llm]\nmax_tokens = 99999999999999999999", "llm.max_tokens", "less than"),
        ("[limits]\nuser_daily_tokens = 99999999999999999999", "limits.user_daily_tokens",
         "less than"),
        ("[limits]\nwindow_seconds = 1e20", "limits.window_seconds", "less than"),
        ("[[channels]]\nplatform = \"slack\"\nchannel = \"C1\"\nquiet_seconds = 1e300",
         "channels.0.quiet_seconds", "less than"),
        ("[storage]\nbusy_timeout_seconds = 0", "storage.busy_timeout_seconds", "greater than"),
    ],
)  # fmt: skip
def test_wrong_types_and_absurd_numbers_are_refused_naming_the_key(
    tmp_path: Path, toml: str, key: str, why: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load(tmp_path, toml)
    message = str(error.value)
    assert message.startswith(f"{key}: ") and why in message, message
    assert "\n" not in message


def test_integers_are_fine_seconds_and_the_defaults_parse(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[debounce]\nquiet_seconds = 2\nmax_wait_seconds = 10\n")
    config = load_config(path)
    assert config.debounce.quiet_seconds == 2.0 and isinstance(config.debounce.quiet_seconds, float)
    assert parse_config({}).lease.ttl_seconds == 30.0


@pytest.mark.parametrize(
    "url",
    [
        "bot:hunter2@db.internal/burstbot",  # the scheme forgotten
        "postgresql//bot:hunter2@db/burstbot",  # a missing colon
        "hunter2",
        "bot:hunter2@db://x",  # what precedes :// is no scheme either
        "postgresql://bot:hunter2@db.internal:notaport/burstbot",
        "postgresql://bot:hunter2@[db.internal/burstbot",
    ],
)
def test_a_bad_storage_url_is_never_echoed(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"storage": {"url": url}})
    message = str(error.value)
    assert message.startswith("storage.url: ")
    for secret in ("hunter2", "bot:", "db.internal", "notaport"):
        assert secret not in message, message


def test_an_unknown_scheme_is_named_and_nothing_after_it() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"storage": {"url": "mysql://bot:hunter2@db/burstbot"}})
    assert str(error.value) == (
        "storage.url: unsupported scheme 'mysql' (use sqlite:/// or postgresql://)"
    )


def test_open_store_never_echoes_a_url_without_a_scheme() -> None:
    from storage import open_store

    with pytest.raises(ConfigError) as error:
        open_store("bot:hunter2@db/burstbot")
    assert str(error.value) == (
        "storage.url: not a storage URL (use sqlite:///path or postgresql://user@host/db)"
    )


def test_the_old_delivery_attempt_limit_is_accepted_with_one_deprecation_line(
    tmp_path: Path,
) -> None:
    from tests.test_cli import burstbot

    config = tmp_path / "c.toml"
    config.write_text('[llm]\nprovider = "offline"\n[engine]\ndelivery_max_attempts = 8\n')
    assert parse_config({"engine": {"delivery_max_attempts": 8}}).deprecations() != []
    assert parse_config({}).deprecations() == []
    result = burstbot(["check-config", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "engine.delivery_max_attempts is deprecated and ignored" in line
    assert "delivery_give_up_hours" in line
