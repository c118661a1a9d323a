"""`burstbot workspaces`: the Slack workspaces installed through "Add to Slack", from the store,
with the model tokens their conversations used today (UTC). Tokens themselves are never shown;
the store only holds them encrypted anyway.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.cli.status import in_workspace, relative
from bot.config import DAY
from bot.ops.guards import spent_tokens
from bot.ops.inspection import render_table

if TYPE_CHECKING:
    from storage.sql_store import SqlStore


async def workspace_lines(store: SqlStore[Any], now: float) -> list[str]:
    installed = await store.installations()
    if not installed:
        return ['no Slack workspace installed (slack.install = "oauth": see docs/slack.md)']
    today = now // DAY * DAY
    generations = [g for g in await store.generations() if g.ended_at >= today]
    rows = []
    for record in installed:
        conversations = await store.workspace_conversations("slack", record.team_id)
        tokens = sum(spent_tokens(g.usage) for g in generations
                     if in_workspace(g.conversation_id, record.team_id))  # fmt: skip
        expiry = "never" if record.expires_at is None else relative(record.expires_at, now)
        installed_at = datetime.fromtimestamp(record.installed_at, UTC)
        rows.append([record.team_name, record.team_id, installed_at.strftime("%Y-%m-%d %H:%M"),
                     expiry, str(len(conversations)), str(tokens)])  # fmt: skip
    headers = ["WORKSPACE", "ID", "INSTALLED (UTC)", "TOKEN EXPIRES", "CONVERSATIONS",
               "TOKENS TODAY"]  # fmt: skip
    count = len(installed)
    return [*render_table(headers, rows), f"{count} workspace{'' if count == 1 else 's'} installed"]
