"""Clicks: a button press is input, like a message (G16 in docs/design.md).

Rules:

- A click is stored with the platform's own id for it before the platform is answered; the same
  id delivered again is a duplicate and changes nothing.
- It is decided by one compare-and-swap against the state it acts on, in the transaction that
  stores it: the first decision wins; a stale or repeated one changes nothing, and its outcome
  says why so the front end can tell the clicker alone.
- A stop acts on the conversation's pending burst, named by its draft (a Stop button) or by one
  of its messages (a Slack agent session's stop: the message its "processing" status went on
  for): it applies only while what it names is still the pending burst's, the burst is
  unanswered and not already stopped, and the clicker wrote part of the burst or is an admin.
  It counts as input (the version moves), so the generation is cancelled through the supersede
  path; the worker then answers the burst with what it had shown and who stopped it.

Approve and Deny (bot/core/approvals.py) name the card they are on and decide the card's action
by a compare-and-swap on its row. Kinds to come (votes) reuse the table: one row per platform
click id, with what it names (`target`) and the outcome its decision had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from bot.core.events import ConversationKey

ClickKind = Literal["stop", "vote", "approve", "deny"]  # votes: bot/core/votes.py
ClickOutcome = Literal[
    "stopped",
    "approved",
    "denied",
    "duplicate",
    "ended",
    "already_stopped",
    "already_decided",
    "refused",
]
ACTED: frozenset[ClickOutcome] = frozenset({"stopped", "approved", "denied"})

NOTICES: dict[ClickOutcome, str] = {
    "ended": "That answer has already ended; nothing was stopped.",
    "already_stopped": "That answer was already stopped.",
    "refused": "Only the people it answers (or an admin) can stop this answer.",
}
APPROVAL_NOTICES: dict[ClickOutcome, str] = {
    "ended": "That request is no longer waiting (it expired or a newer message replaced it); "
    "nothing was run.",
    "already_decided": "That request was already decided.",
    "refused": "You may not decide this request.",
}


@dataclass(frozen=True, slots=True)
class Click:
    click_id: str  # the platform's own id of this press: Slack action_ts + container, Discord's
    key: ConversationKey
    kind: ClickKind
    target: str  # what the click names: a stop the draft (or a message) of its burst, Approve/Deny
    # their card
    clicker_id: str
    clicker_name: str


@dataclass(frozen=True, slots=True)
class ClickAnswer:
    outcome: ClickOutcome
    kind: ClickKind = "stop"

    @property
    def acted(self) -> bool:
        return self.outcome in ACTED

    @property
    def notice(self) -> str | None:
        """What the clicker alone is told; None when the click acted or was a repeat delivery
        (its first delivery was already answered)."""
        return (NOTICES if self.kind == "stop" else APPROVAL_NOTICES).get(self.outcome)


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A decided stop of the conversation's pending burst: it covers input up to `version`."""

    version: int
    clicker_id: str
    clicker_name: str
    clicked_at: float


@dataclass(frozen=True, slots=True)
class ClickRecord:
    click_id: str
    conversation_id: str
    kind: str
    target: str
    clicker_id: str
    clicker_name: str
    clicked_at: float
    outcome: str | None
    version: int | None


def stop_reason(clicker_name: str) -> str:
    """Who stopped a burst, as its answer and generation say it ("stopped" once they are erased)."""
    return f"stopped by {clicker_name}" if clicker_name else "stopped"


def stopped_text(shown: str, clicker_name: str) -> str:
    """The stopped answer: what the draft showed, then who stopped it."""
    line = f"_({stop_reason(clicker_name)})_"
    return f"{shown.rstrip()}\n\n{line}" if shown.strip() else line


class ClickStore(Protocol):
    """The store's side of clicks (the engine's)."""

    async def stop(self, click: Click, admin: bool, now: float) -> ClickOutcome:
        """Store the click and decide it in one transaction (see the module's rules)."""
        ...

    async def pending_stop(self, conversation_id: str) -> StopRequest | None:
        """The decided stop of the conversation's pending burst, if any."""
        ...

    async def clicks(self, conversation_id: str) -> list[ClickRecord]:
        """Every click of the conversation, oldest first (`explain`)."""
        ...
