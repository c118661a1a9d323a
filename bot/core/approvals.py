"""Approve / Deny for tools that act (G16 in docs/design.md, docs/controls.md).

Rules:

1. A call to a tool that is not read-only asks first when its server (or the tool) says
   `approve = "ask"`: the generation stops at the call (`ApprovalNeeded`) and the burst is
   parked: the call is recorded as an action `waiting` (fenced by the lease token) with the
   generation's continuation, its card goes to the outbox in the same transaction, and the lease
   is released without an answer. The timer waits for the question's expiry; no lease and no
   generation slot is held meanwhile.
2. A click is stored with the platform's id and decided in one transaction: `waiting ->
   approved | denied` only while the action waits, has not expired, the burst's version is the
   one it asked at and the clicker may decide (the burst's authors and admins, or admins only).
   The decided burst's timer is due at once.
3. The worker that takes the lease next resumes the answer from the continuation: an approved
   call is claimed `approved -> running` (fenced by the lease token) before the server is asked,
   so a crash after that leaves it "may have run", never repeated; a denied or expired one is
   given to the model as refused. One answer covers the burst either way.
4. Newer input before the decision makes the card stale: `waiting -> superseded`, its key moved
   aside so the newer burst's identical call asks again with a card of its own.
5. Every ending edits the card to its outcome through the outbox (a row of its own, once per
   card), so a crash re-does it and never does it twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from bot.core.actions import ActionRecord, NewAction
from bot.core.clicks import Click, ClickOutcome

Approval = Literal["waiting", "approved", "denied", "expired", "superseded", "running"]
Approvers = Literal["authors_and_admins", "admins"]
Ending = Literal["expired", "superseded"]


@dataclass(frozen=True, slots=True)
class Continuation:
    """What the parked generation added after its prompt: the earlier rounds' turns, the
    assistant content holding the call that asks, and the text it had written so far."""

    turns: list[dict[str, Any]] = field(default_factory=list)
    content: list[dict[str, Any]] = field(default_factory=list)
    shown: str = ""

    def to_json(self) -> str:
        return json.dumps({"turns": self.turns, "content": self.content, "shown": self.shown})

    @staticmethod
    def from_json(text: str) -> Continuation:
        data = json.loads(text)
        return Continuation(list(data["turns"]), list(data["content"]), str(data["shown"]))


class ApprovalNeeded(Exception):
    """The generation reached a call that must ask: it ends here and the burst is parked."""

    def __init__(self, action: NewAction, asked_by: str) -> None:
        super().__init__(f"{action.server}.{action.tool} waits for approval")
        self.action = action
        self.asked_by = asked_by
        self.continuation = Continuation()


@dataclass(frozen=True, slots=True)
class Parked:
    """The burst's parked call: the action and its continuation."""

    action: ActionRecord
    continuation: Continuation


def card_text(server: str, tool: str, arguments: str, asked_by: str, wait_seconds: float) -> str:
    """The question: the tool, its arguments as the model gave them, and who asked."""
    return (
        f"🔐 Approval needed: `{server}.{tool}`\n```{arguments}```\n"
        f"Asked for {asked_by}. Approve or Deny "
        f"(expires in {_wait_in_words(wait_seconds)}; not run until then)."
    )


def _wait_in_words(seconds: float) -> str:
    """A wait under a minute in seconds: rounding 20 s up to "1 min" would promise three times
    the time the person really has."""
    if seconds < 59.5:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


def outcome_line(approval: Approval, decided_by: str | None, result: str | None = None) -> str:
    """How the card ends."""
    if approval == "running":
        if result is None:
            return f"✅ Approved by {decided_by}; its outcome is unknown (it may have run)."
        first = result.strip().splitlines()
        return f"✅ Approved by {decided_by}" + (f": {first[0][:200]}" if first else "")
    if approval == "denied":
        return f"🚫 Denied by {decided_by}; not run."
    if approval == "expired":
        return "⌛ Expired, not run."
    return "↪️ Superseded by a newer message, not run."


def ended_card(action: ActionRecord, line: str) -> str:
    """The card's last text: what it asked, then how it ended (no buttons)."""
    return f"🔐 `{action.server}.{action.tool}`\n```{action.arguments}```\n{line}"


def refusal(action: ActionRecord) -> str:
    """The tool_result the model is given for a call that did not run."""
    if action.approval == "denied":
        return f"{action.decided_by} denied this call; it did not run. Do not ask for it again."
    if action.approval == "expired":
        return "Nobody approved this call in time; it did not run. Do not ask for it again."
    return "This call waits for a person's approval (or no longer can be made); it has not run."


class ApprovalStore(Protocol):
    """The store's side of approvals (storage/approvals.py)."""

    async def park(
        self, action: NewAction, asked_by: str, continuation: Continuation, wait_seconds: float,
        card: str, reply_to: str | None,
    ) -> int | None:  # fmt: skip
        """Record the call as waiting, queue its card, park the timer until the expiry and
        release the lease, in one transaction fenced by the lease token; the card's reply id, or
        None when the lease was lost (nothing is recorded)."""
        ...

    async def parked(self, conversation_id: str, from_version: int) -> Parked | None: ...

    async def decide(
        self, click: Click, admin: bool, approvers: Approvers, now: float
    ) -> ClickOutcome:
        """Store the click and decide it (rule 2) in one transaction."""
        ...

    async def keep_waiting(self, action: ActionRecord, token: int) -> None:
        """Served before anyone decided and before the expiry: the timer parked until the expiry
        again (unless a click decided it meanwhile: its wake stands) and the lease released, in
        one transaction."""
        ...

    async def claim_approved(self, conversation_id: str, key: str, token: int) -> bool: ...

    async def finish_approved(
        self, action: ActionRecord, result: str, failed: bool, now: float, card: str
    ) -> int | None:
        """The result, and the card's ending, in one transaction; the ending's reply id."""
        ...

    async def end_card(self, action: ActionRecord, card: str, now: float) -> int | None:
        """Queue the card's ending unless it has one (an approved call whose outcome is unknown):
        its reply id, or None."""
        ...

    async def end_approval(
        self, action: ActionRecord, token: int, ending: Ending, now: float, card: str
    ) -> int | None:
        """`waiting -> expired | superseded` under the lease, with the card's ending; the
        ending's reply id, or None when the compare-and-swap did not apply."""
        ...
