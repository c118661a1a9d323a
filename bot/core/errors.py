"""One error tree for burstbot; library exceptions are mapped into it at the edge.

    BurstbotError
    ├── ConfigError              bad or missing configuration (CLI exits 2 with one line)
    ├── StoreError               the database failed or refused
    ├── ReplierError             the model call failed
    │   ├── RetryableReplierError    rate limit, overload, timeout, connection, 5xx
    │   └── PermanentReplierError    bad request, auth, not found: retrying cannot help
    ├── DeliveryError            posting to the platform failed
    │   ├── RetryableDeliveryError   try again later (optionally after `retry_after` seconds)
    │   │   └── RateLimited          the platform said 429: hold its budget for `retry_after`
    │   ├── PermanentDeliveryError   the post can never succeed (channel gone, no permission)
    │   │   └── MessageGone          the message to edit was deleted (a person removed a draft)
    │   └── ClaimLost                this delivery's claim was taken or ran out: stop posting
    └── FetchError               reading from the platform failed (catch-up, thread lookups): try
                                 again later (after `retry_after` seconds), unless `permanent`

Code that catches library exceptions (anthropic, slack_sdk, discord, aiosqlite, asyncpg) re-raises
one of these with `raise ... from exc`; the engine only ever handles this tree.
"""

from __future__ import annotations


class BurstbotError(Exception):
    """Base of every error burstbot raises on purpose."""


class ConfigError(BurstbotError):
    pass


class StoreError(BurstbotError):
    pass


class ReplierError(BurstbotError):
    pass


class RetryableReplierError(ReplierError):
    pass


class PermanentReplierError(ReplierError):
    pass


class DeliveryError(BurstbotError):
    pass


class RetryableDeliveryError(DeliveryError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(RetryableDeliveryError):
    """A 429: every call on that budget waits `retry_after` seconds, not just this one."""


class PermanentDeliveryError(DeliveryError):
    pass


class MessageGone(PermanentDeliveryError):
    """An edit found its message deleted: what it was to show must be posted anew."""


class ClaimLost(DeliveryError):
    """Raised by a delivery fence before a part is posted: another worker may be delivering."""


class FetchError(BurstbotError):
    def __init__(
        self, message: str, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent

    @classmethod
    def of(cls, error: DeliveryError) -> FetchError:
        """A platform call's failure, read as a read's: the same Retry-After and verdict."""
        retry_after = error.retry_after if isinstance(error, RetryableDeliveryError) else None
        return cls(str(error), retry_after, isinstance(error, PermanentDeliveryError))
