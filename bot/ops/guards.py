"""Cost guards: rate and size limits at arrival, token budgets before each model call.

Where each check lives, and why:

- at arrival (`check_message`, called by the app before storage): characters per message and the
  per-user message rate. A refused message is never stored, so it cannot start or grow a burst.
- before the model call (`admit`, called by the engine with the whole burst): messages and
  characters per burst, and the daily token budgets (per user and global). A refused burst is
  committed as answered with a short notice instead of a model reply, so nothing stays pending.
- after every model call (`charge`), finished or cancelled: its tokens count against the budgets.

Counters live in the database (`CounterStore`), in fixed windows: the rate window for rate and
size limits, the UTC day for budgets. Each notice is sent at most once per window and subject;
later refusals in that window are silent (and still logged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from bot.config import LimitsConfig
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.gate import Refusal
from bot.core.store import StoredMessage, TokenUsage

DAY_SECONDS = 86_400.0


@runtime_checkable
class CounterStore(Protocol):
    async def add_to_counter(
        self, scope: str, window_start: int, amount: int, expires_at: float, now: float
    ) -> int:
        """Atomically add to a windowed counter and return its new total (expired rows pruned)."""
        ...

    async def read_counter(self, scope: str, window_start: int) -> int: ...


def limits_active(limits: LimitsConfig) -> bool:
    """Any guard switched on (0 means off)."""
    return any(
        (
            limits.user_messages_per_window,
            limits.user_daily_tokens,
            limits.global_daily_tokens,
            limits.max_message_chars,
            limits.max_burst_chars,
            limits.max_burst_messages,
        )
    )


def spent_tokens(usage: TokenUsage) -> int:
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
    )


class CostGuards:
    def __init__(
        self,
        limits: LimitsConfig,
        counters: CounterStore,
        is_admin: Callable[[str, str], bool] = lambda platform, user: False,
    ) -> None:
        self.limits = limits
        self.counters = counters
        self.is_admin = is_admin

    # arrival ---------------------------------------------------------------------------------
    async def check_message(self, message: IncomingMessage, now: float) -> Refusal | None:
        lim, platform = self.limits, message.key.platform
        if lim.admins_exempt and self.is_admin(platform, message.author_id):
            return None
        user = f"{platform}:{message.author_id}"
        if lim.max_message_chars and len(message.text) > lim.max_message_chars:
            return await self._refuse("message_too_long", user, lim.size_notice, now)
        if lim.user_messages_per_window and message.via != "catch-up":  # sent over time, earlier
            window, expires = self._window(now)
            count = await self.counters.add_to_counter(f"rate:{user}", window, 1, expires, now)
            if count > lim.user_messages_per_window:
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
        day = int(now // DAY_SECONDS)
        budget = lim.global_daily_tokens
        if budget and await self.counters.read_counter("tokens:global", day) >= budget:
            return await self._refuse("global_budget", key.id, lim.budget_notice, now, daily=True)
        budget = lim.user_daily_tokens
        for user in users if budget else []:
            if await self.counters.read_counter(f"tokens:{user}", day) >= budget:
                return await self._refuse("user_budget", user, lim.budget_notice, now, daily=True)
        return None

    # after the model call --------------------------------------------------------------------
    async def charge(
        self, key: ConversationKey, burst: Sequence[StoredMessage], usage: TokenUsage, now: float
    ) -> None:
        """The whole generation counts globally and against every (non-exempt) burst author."""
        tokens = spent_tokens(usage)
        if not tokens or not (self.limits.global_daily_tokens or self.limits.user_daily_tokens):
            return
        day = int(now // DAY_SECONDS)
        expires = (day + 2) * DAY_SECONDS
        await self.counters.add_to_counter("tokens:global", day, tokens, expires, now)
        for user in self._charged_users(key, burst):
            await self.counters.add_to_counter(f"tokens:{user}", day, tokens, expires, now)

    # plumbing --------------------------------------------------------------------------------
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
            window, expires = int(now // DAY_SECONDS), (now // DAY_SECONDS + 2) * DAY_SECONDS
        else:
            window, expires = self._window(now)
        kind = "budget" if daily else ("rate" if reason == "rate_limited" else "size")
        first = await self.counters.add_to_counter(
            f"notice:{kind}:{subject}", window, 1, expires, now
        )
        return Refusal(reason, notice if first == 1 else None)
