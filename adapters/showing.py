"""What our recent messages show, so that an edit that changes nothing is never sent.

A draft's stream, the waiting mark and a reply's final edit can each ask to set a message to the
text (and, on Slack, the metadata) it already shows: the rendered text of two different partial
texts can be equal, and a stream's last edit often shows the whole answer already. Each such edit
spends the platform's budget (Slack's `chat.update` per workspace, Discord's writes per channel)
for nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

SHOWING_SIZE = 1_000  # messages whose shown text is remembered (drafts streaming at once)


class Showing:
    """What each recent message of ours shows, as our last post or edit of it set it: an edit
    to the same text and metadata changes nothing and is not sent. Only a courtesy against
    waste (the platform's budget): a final edit is read back after it either way, and a message
    that shows something else is forgotten and edited."""

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
