"""Fair shares: which due bursts start first when not all of them may (docs/scaling.md).

- **closed windows before speculation**: a burst whose quiet window has closed is what somebody
  waits for; an early start (G4) only saves time when capacity is spare.
- **then workspaces, then channels, then people**: each next start goes to the workspace with
  the fewest generations running and chosen so far, within it to the channel with the fewest,
  within that to the person with the fewest (the author of the burst's latest message; on
  Discord's per-person scope the conversation is the person), then to the burst due first. One
  workspace sending most of the bursts gets what the others leave, not more; one person's many
  threads in a channel take turns with the others'.
- **every process's generations count**: the running counts are what all processes sharing the
  database generate now (their live leases, `BurstStore.shares`), not only this one's, so a
  workspace flooding one process is held back on the others too. Read only when capacity is
  short (not every due burst may start): otherwise the order decides nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from bot.core.events import ConversationKey
from bot.core.store import DueTimer


def speculative(timer: DueTimer, now: float) -> bool:
    """Due at its early start while its window is still open."""
    return timer.start_at is not None and timer.due_at > now


def _shares(conversation_id: str, person: str) -> tuple[str, str, str]:
    """The workspace, the channel and the person a conversation's generation counts against."""
    try:
        key = ConversationKey.parse(conversation_id)
    except ValueError:
        return conversation_id, conversation_id, conversation_id
    workspace = f"{key.platform}/{key.workspace}"
    channel = f"{workspace}/{key.channel}"
    return workspace, channel, f"{channel}/{person}" if person else conversation_id


def fair_order(
    timers: Sequence[DueTimer],
    running: Iterable[str],
    now: float,
    people: Mapping[str, str] | None = None,
) -> list[DueTimer]:
    """`timers` in the order they should start, given the conversations generating now (every
    process's) and the person of each conversation (`people`; without one, the conversation
    stands for its person)."""
    people = people or {}
    counts: Counter[str] = Counter()
    for conversation_id in running:
        counts.update(_shares(conversation_id, people.get(conversation_id, "")))
    left = [(t, _shares(t.conversation_id, people.get(t.conversation_id, ""))) for t in timers]
    ordered: list[DueTimer] = []
    while left:
        best = min(
            range(len(left)),
            key=lambda i: (
                speculative(left[i][0], now),
                *(counts[share] for share in left[i][1]),
                left[i][0].start_at if speculative(left[i][0], now) else left[i][0].due_at,
            ),
        )
        timer, shares = left.pop(best)
        counts.update(shares)
        ordered.append(timer)
    return ordered
