"""Votes: 👍/👎 on an answer (docs/controls.md#feedback). A vote is a click (G16 in
docs/design.md), so it follows the click rules of `clicks.py`, with its own decision:

- Stored with the platform's own id for the press (the `clicks` table, kind `vote`) before the
  platform is answered; the same id delivered again is a duplicate and changes nothing.
- One vote per person per answer: the `votes` row of (answer, voter) holds the value and the
  platform's time of the press it came from. A press replaces it only when it is newer (the
  compare-and-swap, in the transaction that stores the click): a later 👎 after a 👍 counts as
  👎, and an older press delivered late changes nothing.
- Only an answer that carries the buttons takes votes (its outbox row says so: `feedback`), and
  only from a button of its own conversation.

The answer is named by its reply id (`r<outbox row id>`), the same the platform post is labelled
with, so a press is understood by any process and after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from bot.core.clicks import Click

VoteValue = Literal["up", "down"]
VoteOutcome = Literal["voted", "duplicate", "outdated", "not_votable"]
VOTE_VALUES: tuple[VoteValue, ...] = ("up", "down")
THUMBS: dict[VoteValue, str] = {"up": "👍", "down": "👎"}

VOTE_NOTICES: dict[VoteOutcome, str] = {"not_votable": "That answer cannot be rated."}
"""What the clicker alone is told when the press counted nothing new; nothing for a repeat
delivery (its first was answered) or a press older than the vote it replaced (the newer one was
answered). A counted vote may be thanked (`thanks`): each front end says whether it does."""


@dataclass(frozen=True, slots=True)
class Vote:
    click: Click  # kind "vote"; its target is `vote_target(reply_id, value)`
    reply_id: str  # the answer's reply id, `r<row id>`
    value: VoteValue
    pressed_at: float  # the platform's time of the press (Slack `action_ts`, Discord's id)


@dataclass(frozen=True, slots=True)
class VoteAnswer:
    outcome: VoteOutcome

    @property
    def notice(self) -> str | None:
        return VOTE_NOTICES.get(self.outcome)


def thanks(value: VoteValue) -> str:
    """The clicker's own confirmation of a counted vote."""
    return f"Thanks: your {THUMBS[value]} is counted (press the other button to change it)."


@dataclass(frozen=True, slots=True)
class VoteRecord:
    """One person's vote on one answer, as it stands (`explain`, `usage`)."""

    reply_id: int
    conversation_id: str
    voter_id: str
    voter_name: str
    value: str
    voted_at: float
    model: str
    click_id: str


def vote_target(reply_id: str, value: VoteValue) -> str:
    """What a vote click names in the `clicks` table: the answer and the value pressed."""
    return f"{reply_id}:{value}"


def reply_row_id(reply_id: str) -> int | None:
    """The outbox row id of a reply id (`r12` → 12); None for anything else."""
    digits = reply_id.removeprefix("r")
    if not reply_id.startswith("r") or not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits)


def vote_value(text: str) -> VoteValue | None:
    return "up" if text == "up" else "down" if text == "down" else None


def tally(records: list[VoteRecord]) -> tuple[int, int]:
    """(👍, 👎) among the records."""
    ups = sum(1 for r in records if r.value == "up")
    return ups, len(records) - ups


class VoteStore(Protocol):
    """The store's side of votes (the engine's, `explain`'s and `usage`'s)."""

    async def vote(self, vote: Vote, now: float) -> VoteOutcome:
        """Store the click and decide it in one transaction (see the module's rules)."""
        ...

    async def votes(
        self, conversation_id: str | None = None, since: float = 0.0
    ) -> list[VoteRecord]:
        """The votes as they stand, of one conversation or of all, cast since `since`."""
        ...
