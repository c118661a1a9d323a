"""A workspace uninstalls the app, or revokes its bot token: what goes, at once (docs/slack.md,
"What an uninstall does").

Its pending replies nobody is posting fail now with `NOT_INSTALLED` as the reason (a reply being
posted fails on its own next call with the same reason), so no day of retries is spent against a
dead token and `status` shows them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from adapters.slack.inbound import PLATFORM
from adapters.slack.workspaces import NOT_INSTALLED, InstalledWorkspaces, SingleWorkspace
from bot.config import SlackConfig
from bot.core.clock import Clock
from bot.core.frontend import Host
from bot.core.installations import forget_workspace

log = logging.getLogger("burstbot.slack")


@dataclass(eq=False)
class Uninstalls:
    host: Host
    workspaces: SingleWorkspace | InstalledWorkspaces
    config: SlackConfig
    clock: Clock

    async def revoked(self, team: str, event_type: str) -> None:
        """What `event_type` (app_uninstalled, tokens_revoked) ends for the workspace."""
        book = self.host.installations
        deleted = await book.delete_installation(team)
        self.workspaces.forget(team)
        reason = f"slack: {NOT_INSTALLED} ({team}, {event_type})"
        failed = await book.fail_workspace_replies(PLATFORM, team, reason, self.clock.now())
        erased = ""
        if event_type == "app_uninstalled" and self.config.forget_on_uninstall:
            forgotten = await forget_workspace(book, PLATFORM, team)
            erased = "; erased " + ", ".join(
                f"{n} {name.replace('_', ' ')}" for name, n in forgotten.items()
            )
        log.warning("slack: %s in workspace %s: tokens %s, %d pending replies failed%s",
                    event_type, team, "deleted" if deleted else "already deleted", failed,
                    erased)  # fmt: skip
