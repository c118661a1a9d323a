"""A burst under a lease: what step 3 collected, and what steps 5 and 7 build from it.

Every field is fixed when the worker collects (the lease's fencing token and V, the pending
messages up to V, the start time), so a worker's later steps all speak about the same burst.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass

from bot.core.errors import ReplierError, RetryableReplierError
from bot.core.events import ConversationKey
from bot.core.progress import GenerationProgress
from bot.core.store import (
    FinalCheck,
    GenerationOutcome,
    GenerationRecord,
    Lease,
    NewReply,
    StoredMessage,
    Timing,
    TokenUsage,
)

log = logging.getLogger("burstbot.engine")


@dataclass(frozen=True, slots=True)
class Burst:
    lease: Lease
    key: ConversationKey
    timing: Timing
    messages: tuple[StoredMessage, ...]
    started_at: float
    waited: float = 0.0  # for the API's capacity, before the worker started (admission.py)
    waited_for: str = ""

    @property
    def deadline(self) -> float:
        return math.inf if self.lease.deadline_at is None else self.lease.deadline_at

    def final_check(self, now: float) -> FinalCheck:
        """Step 5 as of `now`: newer input discards the reply unless the deadline has passed."""
        lease = self.lease
        return FinalCheck(lease.token, lease.version, deadline_passed=now >= self.deadline)

    def final_check_past_newer_input(self) -> FinalCheck:
        """For a reply that is not the model's (a guard's notice, the apology): it answers what it
        saw whatever arrived since; the newer input forms the next burst."""
        return FinalCheck(self.lease.token, self.lease.version, deadline_passed=True)

    def answer(self, text: str, usage: GenerationProgress, feedback: bool = False) -> NewReply:
        """The burst's answer; `feedback`: it carries the 👍/👎 buttons."""
        reply_to = self.messages[-1].message_id
        covers = self.lease.answered_version
        return NewReply(text, "answer", reply_to, spent(usage), covers, feedback, usage.model)

    def apology(self, text: str) -> NewReply:
        reply_to = self.messages[-1].message_id
        return NewReply(text, "apology", reply_to, TokenUsage(), self.lease.answered_version)

    def record(
        self,
        outcome: GenerationOutcome,
        usage: GenerationProgress,
        ended_at: float,
        error: str | None,
    ) -> GenerationRecord:
        """How the work on this burst ended, for the store's `generations` table."""
        lease = self.lease
        return GenerationRecord(
            conversation_id=lease.conversation_id,
            lease_token=lease.token,
            from_version=lease.answered_version,
            to_version=lease.version,
            started_at=self.started_at,
            ended_at=ended_at,
            outcome=outcome,
            usage=spent(usage),
            error=error,
            model=usage.model,
            user_id=self.messages[-1].author_id if self.messages else "",
            searches=tuple(usage.searches),
            waited=self.waited,
            waited_for=self.waited_for,
        )


def spent(usage: GenerationProgress) -> TokenUsage:
    """A snapshot of the counts the replier keeps updating while it streams."""
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.web_searches,
    )


def reply_text(generation: asyncio.Task[str], conversation_id: str) -> str:
    """The reply text. An empty answer or a crashed replier is a retryable model failure."""
    try:
        text = generation.result()
    except ReplierError:
        raise
    except Exception as exc:
        log.exception("conversation %s: replier crashed", conversation_id)
        raise RetryableReplierError(repr(exc)) from exc
    if not text.strip():
        raise RetryableReplierError("the model returned no text")
    return text
