"""Reloading the config of a running process (SIGHUP, `burstbot reload`).

What a process reads per burst or per message takes effect at once; what it built at start (the
store, the front ends and their ports or tokens, the model client, catch-up: `RESTART_SECTIONS`,
`RESTART_LLM_KEYS`) keeps its running value and is named as needing a restart
(docs/configuration.md). A file that does not load is refused whole and the running config stays.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.config import Config
from bot.core.errors import ConfigError

RESTART_SECTIONS = (
    "storage", "console", "slack", "discord", "metrics", "web", "engine", "lease", "catch_up",
    "telemetry",
)  # fmt: skip
LIVE_FRONTEND_KEYS = ("slack.assistant",)  # read per event and thread: applied at once
RESTART_LLM_KEYS = (  # the model client's own: it is built once
    "provider", "api_key_env", "base_url", "timeout_seconds", "max_retries", "cut_note",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    config: Config
    """The config to run with: the new file's live settings, the running restart-only ones."""
    applied: tuple[str, ...]
    """Changed keys that take effect with the next burst (`debounce.quiet_seconds`)."""
    needs_restart: tuple[str, ...]
    """Changed keys that keep their running value until the process restarts."""


def _changed(old: Any, new: Any, where: str) -> list[str]:
    """Dotted keys whose values differ (lists such as `channels` count as one key)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = dict.fromkeys([*old, *new])
        found: list[str] = []
        for key in keys:
            found += _changed(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        return found
    return [] if old == new else [where]


def plan_reload(running: Config, loaded: Config) -> ReloadPlan:
    """Split what changed between the running config and a freshly loaded one."""
    changed = _changed(running.model_dump(), loaded.model_dump(), "")
    restart_keys = {*RESTART_SECTIONS, *(f"llm.{key}" for key in RESTART_LLM_KEYS)}

    def under(key: str, keys: Iterable[str]) -> bool:
        return any(key == k or key.startswith(k + ".") for k in keys)

    def needs_restart(key: str) -> bool:
        return under(key, restart_keys) and not under(key, LIVE_FRONTEND_KEYS)

    kept: dict[str, object] = {name: getattr(running, name) for name in RESTART_SECTIONS}
    kept["slack"] = running.slack.model_copy(update={"assistant": loaded.slack.assistant})
    kept["llm"] = loaded.llm.model_copy(
        update={key: getattr(running.llm, key) for key in RESTART_LLM_KEYS}
    )
    return ReloadPlan(
        config=loaded.model_copy(update=kept),
        applied=tuple(k for k in changed if not needs_restart(k)),
        needs_restart=tuple(k for k in changed if needs_restart(k)),
    )


@contextlib.contextmanager
def pid_file(path: str) -> Iterator[None]:
    """`burstbot run` records its process id where `burstbot reload` will look for it ("":
    nowhere), and removes the file at exit, but only if it is still ours (a newer process may
    own it)."""
    try:
        if path:
            Path(path).write_text(f"{os.getpid()}\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"engine.pid_file: cannot write {path} ({exc.strerror})") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path and Path(path).read_text(encoding="utf-8").strip() == str(os.getpid()):
                Path(path).unlink()


def read_pid_file(path: str) -> int:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"engine.pid_file: cannot read {path} ({exc.strerror}); is burstbot running?"
        ) from None
    if not text.isdigit() or int(text) <= 1:
        raise ConfigError(f"engine.pid_file: {path} does not hold a process id")
    return int(text)


def send_reload(pid: int) -> None:
    """SIGHUP to a running `burstbot run`; it logs what it applied or why it refused the file."""
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise ConfigError(f"no process {pid}: is burstbot running? (stale pid file?)") from None
    except PermissionError:
        raise ConfigError(f"not allowed to signal process {pid}") from None
