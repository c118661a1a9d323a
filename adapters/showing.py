"""What the paced draft surfaces share: when a draft call may spend the platform's budget
(`paced_turn`), and what our recent messages show, so that an edit that changes nothing is never
sent: a draft's stream, the waiting mark and a reply's final edit can each ask to set a message
to the text (and, on Slack, the metadata) it already shows (two partial texts can render the
same, and a stream's last edit often shows the whole answer already), spending the budget for
nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from bot.core.pacing import Pacer

SHOWING_SIZE = 1_000  # messages whose shown text is remembered (drafts streaming at once)


class Showing:
    """What each recent message of ours shows, as our last post or edit of it set it. Only a
    courtesy against waste: a final edit is read back after it either way, and a message that
    shows something else is forgotten and edited."""

    def __init__(self) -> None:
        self._by_message: OrderedDict[str, tuple[frozenset[str], str, str]] = OrderedDict()

    def note(
        self, message_id: str, sent: str, metadata: dict[str, Any] | None, stored: str = ""
    ) -> None:
        known = self._by_message.pop(message_id, None)
        label = repr(metadata) if metadata is not None else (known[1] if known else "")
        self._by_message[message_id] = (frozenset({sent, stored or sent}), label, stored or sent)
        while len(self._by_message) > SHOWING_SIZE:
            self._by_message.popitem(last=False)

    def unchanged(self, message_id: str, text: str, metadata: dict[str, Any] | None) -> str | None:
        """The text the message shows (as Slack stored it), if updating it to `text` and
        `metadata` would change nothing (None metadata: left as it is); else None."""
        known = self._by_message.get(message_id)
        if known is None or text not in known[0]:
            return None
        if metadata is not None and repr(metadata) != known[1]:
            return None
        return known[2]

    def forget(self, message_id: str) -> None:
        self._by_message.pop(message_id, None)


def paced_turn(pacer: Pacer, posting: bool, edit: tuple[str, str], post: tuple[str, str]) -> bool:
    """`PacedDrafts.draft_turn` on budgets given as (method, scope), never waiting: an edit if
    `edit`'s budget has a token to spare; a new draft's post if `post`'s has one and `edit`'s can
    still take the final edit the draft will owe (else the reply is posted whole)."""
    if not posting:
        return pacer.try_take(*edit)
    if not pacer.admit(*edit):
        return False
    if not pacer.try_take(*post):
        pacer.settle(*edit)
        return False
    return True
