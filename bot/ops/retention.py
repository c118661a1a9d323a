"""Retention and erasure (docs/configuration.md): old stored text goes away by itself, a person's
or a conversation's on request. Pending work is never touched: unanswered messages, replies still
in the outbox and armed timers stay until the pipeline is done with them. Several processes may
sweep: the deletes are idempotent. An erased message keeps its row and platform id with empty
text, name and author, so a redelivery is recognised and dropped instead of stored again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.config import DAY, RetentionConfig
from bot.core.clock import Clock
from bot.core.errors import ConfigError
from bot.core.installations import forget_workspace

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

log = logging.getLogger("burstbot.retention")


def summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in counts.items())


@dataclass(eq=False)
class Retention:
    """The sweeper of a running process; it reads the settings at every sweep (reloadable)."""

    store: SqlStore[Any]
    clock: Clock
    settings: Callable[[], RetentionConfig]
    sweeps: int = field(default=0, init=False)  # sweeps finished (tests wait on it)

    async def sweep(self) -> dict[str, int] | None:
        """Delete what is older than `max_age_days`, and files older than `file_max_age_days`;
        None when both are off."""
        settings = self.settings()
        days, file_days = settings.max_age_days, settings.file_max_age_days
        if not days and not file_days:
            return None
        counts: dict[str, int] = {}
        if days:
            counts = await self.store.prune(self.clock.now() - days * DAY)
            if any(counts.values()):
                log.info(
                    "retention: deleted what was older than %g days: %s", days, summary(counts)
                )
        if file_days and (not days or file_days < days):
            files = await self.store.prune_files(self.clock.now() - file_days * DAY)
            if any(files.values()):
                log.info(
                    "retention: deleted files older than %g days: %s", file_days, summary(files)
                )
            counts = {name: counts.get(name, 0) + files.get(name, 0) for name in {*counts, *files}}
        return counts

    async def run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # the next sweep tries again; nothing pending is at risk
                log.warning("retention: sweep failed (%s); trying again later", exc)
            self.sweeps += 1
            await self.clock.sleep(self.settings().sweep_seconds)


async def forget(
    store: SqlStore[Any],
    now: float,
    user: str | None,
    conversation: str | None,
    workspace: str | None = None,
) -> str:
    """`burstbot forget`: erase one person's (`platform:id` or a bare id), one conversation's or
    one Slack workspace's stored text; returns what was erased, also logged."""
    if workspace is not None:
        if not workspace.isalnum():
            raise ConfigError(f"forget --workspace: not a Slack workspace id: {workspace!r}")
        counts = await forget_workspace(store, "slack", workspace)
        what = f"workspace slack/{workspace}"
    elif conversation is not None:
        counts = await store.forget_conversation(conversation)
        what = f"conversation {conversation}"
    else:
        assert user is not None
        platform, _, user_id = user.rpartition(":")
        counts = await store.forget_user(user_id, platform or None, now)
        what = f"user {user}"
    line = f"forget {what}: erased {summary(counts)}"
    log.warning("%s", line)
    return line
