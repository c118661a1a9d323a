"""Fair shares: which due bursts start first when not all of them may (docs/scaling.md).

- **closed windows before speculation**: a burst whose quiet window has closed is what somebody
  waits for; an early start (G4) only saves time when capacity is spare.
- **then workspaces, then channels, then conversations**: each next start goes to the workspace
  with the fewest generations running and chosen so far, within it to the channel with the
  fewest, then to the conversation (a thread; on Discord's per-person scope, a person) due
  first. One workspace sending most of the bursts gets what the others leave, not more.

Running counts are this process's; processes sharing a database each share theirs this way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from bot.core.events import ConversationKey
from bot.core.store import DueTimer


def speculative(timer: DueTimer, now: float) -> bool:
    """Due at its early start while its window is still open."""
    return timer.start_at is not None and timer.due_at > now


def _shares(conversation_id: str) -> tuple[str, str]:
    """The workspace and the channel a conversation's generation counts against."""
    try:
        key = ConversationKey.parse(conversation_id)
    except ValueError:
        return conversation_id, conversation_id
    workspace = f"{key.platform}/{key.workspace}"
    return workspace, f"{workspace}/{key.channel}"


def fair_order(timers: Sequence[DueTimer], running: Iterable[str], now: float) -> list[DueTimer]:
    """`timers` in the order they should start, given the conversations generating now."""
    workspaces: Counter[str] = Counter()
    channels: Counter[str] = Counter()
    for conversation_id in running:
        workspace, channel = _shares(conversation_id)
        workspaces[workspace] += 1
        channels[channel] += 1
    left = [(t, *_shares(t.conversation_id)) for t in timers]
    ordered: list[DueTimer] = []
    while left:
        best = min(
            range(len(left)),
            key=lambda i: (
                speculative(left[i][0], now),
                workspaces[left[i][1]],
                channels[left[i][2]],
                left[i][0].start_at if speculative(left[i][0], now) else left[i][0].due_at,
            ),
        )
        timer, workspace, channel = left.pop(best)
        workspaces[workspace] += 1
        channels[channel] += 1
        ordered.append(timer)
    return ordered
