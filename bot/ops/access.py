"""Who may talk to the bot: allow and block lists of users, channels and workspaces (Slack
workspaces, Discord guilds), admins, and a policy for direct messages.

Checked by the app before anything is stored, the same way for every platform. An entry matches
a bare id (`U123`) or a platform-qualified one (`slack:U123`). Rules, in order:

1. a blocked user, workspace or channel is refused (block wins, even for admins);
2. admins (`admin_ids`) are let in;
3. direct messages follow `dm_policy`: `off` refuses them, `allowlist` admits only `allow_users`,
   `open` admits anyone the user lists admit (channel and workspace allow lists do not apply);
4. otherwise each non-empty allow list (users, workspaces, channels) must contain the message's.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.config import AccessConfig
from bot.core.events import ConversationKey


def _matches(entries: Sequence[str], platform: str, value: str) -> bool:
    return value in entries or f"{platform}:{value}" in entries


class AccessPolicy:
    def __init__(self, config: AccessConfig) -> None:
        self.config = config

    def is_admin(self, platform: str, user_id: str) -> bool:
        return _matches(self.config.admin_ids, platform, user_id)

    def refusal(self, key: ConversationKey, author_id: str, is_dm: bool) -> str | None:
        """The reason this author may not use the bot here, or None if they may."""
        c, platform = self.config, key.platform
        if _matches(c.block_users, platform, author_id):
            return "blocked user"
        if _matches(c.block_workspaces, platform, key.workspace):
            return "blocked workspace"
        if _matches(c.block_channels, platform, key.channel):
            return "blocked channel"
        if self.is_admin(platform, author_id):
            return None
        user_allowed = _matches(c.allow_users, platform, author_id)
        if is_dm:
            if c.dm_policy == "off":
                return "direct messages are off"
            if c.dm_policy == "allowlist" and not user_allowed:
                return "direct message from a user not on the allow list"
        if c.allow_users and not user_allowed:
            return "user not on the allow list"
        if is_dm:
            return None
        if c.allow_workspaces and not _matches(c.allow_workspaces, platform, key.workspace):
            return "workspace not on the allow list"
        if c.allow_channels and not _matches(c.allow_channels, platform, key.channel):
            return "channel not on the allow list"
        return None
