"""Cost guards: rate and size limits at arrival, token budgets before each model call.

- At arrival (`check_message`, called by the app before storage): characters per message and the
  per-user message rate. A refused message is never stored, so it cannot start or grow a burst.
- Before the model call (`admit`, called by the engine with the whole burst): messages and
  characters per burst, and the daily token budgets (global, per workspace, per channel, per
  user), which also refuse a burst whose files' estimated tokens would overrun what is left of
  them. A refused burst is committed as answered with a short notice, so nothing stays pending.
- After every model call (`charge`), finished or cancelled: its tokens, and each web search as
  `search_tokens` tokens, count against the budgets.

Counters live in the store, in fixed windows: the rate window for rate and size limits, the UTC
day for budgets. Each notice goes out at most once per window and subject; later refusals in that
window are silent (and still logged).

A platform may deliver one message more than once (Slack's `app_mention`/`message` twins, retries,
two processes on one shard), to any process, so the arrival check is decided once per message id:
the first delivery counts and decides, in one transaction with remembering the outcome
(`add_once`); a repeat, wherever it lands, reads that outcome back, never counts against the rate
nor sends a notice, and a refused message's repeat is refused too (else the engine would store
it). A lookup of stored messages could not do this: a refused message is never stored, and twins
arrive together, before either is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.config import DAY, AttachmentsConfig, LimitsConfig
from bot.core.attachments import estimate_tokens
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.guard import Refusal
from bot.core.store import StoredMessage, TokenUsage

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

REPEAT_MEMORY_SECONDS = 3_600.0  # well past Slack's last retry (5 minutes) and a gateway resume


def active_limits(limits: LimitsConfig) -> list[str]:
    """Each guard switched on (0 switches one off), as `burstbot check-config` shows it."""
    return [
        f"{value} {unit}"
        for value, unit in (
            (limits.user_messages_per_window, f"msgs/user/{limits.window_seconds:g}s"),
            (limits.max_message_chars, "chars/msg"),
            (limits.max_burst_messages, "msgs/burst"),
            (limits.max_burst_chars, "chars/burst"),
            (limits.user_daily_tokens, "tokens/user/day"),
            (limits.workspace_daily_tokens, "tokens/workspace/day"),
            (limits.channel_daily_tokens, "tokens/channel/day"),
            (limits.global_daily_tokens, "tokens/day in all"),
        )
        if value
    ]


def spent_tokens(usage: TokenUsage, search_tokens: int = 0) -> int:
    """What a generation counts against the budgets: its tokens, and `search_tokens` a search."""
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
        + usage.web_searches * search_tokens
    )


def attachment_tokens(burst: Sequence[StoredMessage], attachments: AttachmentsConfig) -> int:
    """What the burst's files will cost, estimated from their descriptions before any download
    (see bot/core/attachments.py: images by their dimensions, else 1,600 each). A file that will
    only be named in a note (over `max_bytes`, past `max_per_message`, files off) costs nothing."""
    if not attachments.enabled:
        return 0
    return sum(
        estimate_tokens(a)
        for m in burst
        for a in m.attachments[: attachments.max_per_message]
        if a.size <= attachments.max_bytes
    )


@dataclass(eq=False)
class CostGuards:
    limits: LimitsConfig
    counters: SqlStore[Any]
    is_admin: Callable[[str, str], bool]
    attachments: AttachmentsConfig

    # arrival ---------------------------------------------------------------------------------
    async def check_message(self, message: IncomingMessage, now: float) -> Refusal | None:
        """Size, then rate; decided once per message id (see the module docstring)."""
        lim, key = self.limits, message.key
        if lim.admins_exempt and self.is_admin(key.platform, message.author_id):
            return None
        user = f"{key.platform}:{message.author_id}"
        delivery = f"{key.platform}/{key.workspace}/{message.message_id}"
        window, expires = self._window(now)
        remember = now + max(REPEAT_MEMORY_SECONDS, lim.window_seconds)
        if lim.max_message_chars and len(message.text) > lim.max_message_chars:
            _, first = await self.counters.add_once(
                f"too_long:{delivery}", f"too_long:{user}", window, expires, remember, now
            )
            if not first:
                return Refusal("message_too_long", None, repeat=True)
            return await self._refuse("message_too_long", user, lim.size_notice, now)
        if lim.user_messages_per_window and message.via != "catch-up":  # sent over time, earlier
            count, first = await self.counters.add_once(
                f"rate:{delivery}", f"rate:{user}", window, expires, remember, now
            )
            if count > lim.user_messages_per_window:
                if not first:
                    return Refusal("rate_limited", None, repeat=True)
                return await self._refuse("rate_limited", user, lim.rate_notice, now)
        return None

    # before the model call -------------------------------------------------------------------
    async def admit(
        self, key: ConversationKey, burst: Sequence[StoredMessage], now: float
    ) -> Refusal | None:
        lim = self.limits
        users = self._charged_users(key, burst)
        sized = not (lim.admins_exempt and not users)  # a burst of admins only is exempt
        if sized and lim.max_burst_messages and len(burst) > lim.max_burst_messages:
            return await self._refuse("burst_too_many_messages", key.id, lim.size_notice, now)
        chars = sum(len(m.text) for m in burst)
        if sized and lim.max_burst_chars and chars > lim.max_burst_chars:
            return await self._refuse("burst_too_long", key.id, lim.size_notice, now)
        day = int(now // DAY)
        files = attachment_tokens(burst, self.attachments)
        for reason, scope, budget, subject in self._budgets(key, users):
            used = await self.counters.read_counter(scope, day)
            if used >= budget or used + files > budget:  # spent, or the files alone overrun it
                return await self._refuse(reason, subject, lim.budget_notice, now, daily=True)
        return None

    # after the model call --------------------------------------------------------------------
    async def charge(
        self, key: ConversationKey, burst: Sequence[StoredMessage], usage: TokenUsage, now: float
    ) -> None:
        """The whole generation counts against each budget that is on: the global one, its
        channel's and every (non-exempt) burst author's."""
        tokens = spent_tokens(usage, self.limits.search_tokens)
        if not tokens:
            return
        day = int(now // DAY)
        expires = (day + 2) * DAY
        for _, scope, _, _ in self._budgets(key, self._charged_users(key, burst)):
            await self.counters.add_to_counter(scope, day, tokens, expires, now)

    # plumbing --------------------------------------------------------------------------------
    def _budgets(self, key: ConversationKey, users: list[str]) -> list[tuple[str, str, int, str]]:
        """The daily budgets that are on, as (refusal reason, counter, budget, notice subject):
        only their counters are read and written (each is a write)."""
        lim, where = self.limits, f"{key.platform}/{key.workspace}"  # a Slack team, a guild
        channel = f"tokens:channel:{where}/{key.channel}"  # its threads (or a DM's) share it
        budgets = [
            ("global_budget", "tokens:global", lim.global_daily_tokens, key.id),
            ("workspace_budget", f"tokens:workspace:{where}", lim.workspace_daily_tokens, key.id),
            ("channel_budget", channel, lim.channel_daily_tokens, key.id),
        ]
        budgets += [("user_budget", f"tokens:{u}", lim.user_daily_tokens, u) for u in users]
        return [budget for budget in budgets if budget[2]]

    def _charged_users(self, key: ConversationKey, burst: Sequence[StoredMessage]) -> list[str]:
        authors = dict.fromkeys(m.author_id for m in burst)
        if self.limits.admins_exempt:
            authors = {a: None for a in authors if not self.is_admin(key.platform, a)}
        return [f"{key.platform}:{author}" for author in authors]

    def _window(self, now: float) -> tuple[int, float]:
        size = self.limits.window_seconds
        window = int(now // size)
        return window, (window + 1) * size

    async def _refuse(
        self, reason: str, subject: str, notice: str, now: float, daily: bool = False
    ) -> Refusal:
        """Claim this window's notice of its kind (size, rate or budget) for the subject."""
        if daily:
            window, expires = int(now // DAY), (now // DAY + 2) * DAY
        else:
            window, expires = self._window(now)
        kind = "budget" if daily else ("rate" if reason == "rate_limited" else "size")
        first = await self.counters.add_to_counter(
            f"notice:{kind}:{subject}", window, 1, expires, now
        )
        return Refusal(reason, notice if first == 1 else None)
