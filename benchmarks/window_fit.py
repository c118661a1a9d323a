"""The fit step of the rhythm benchmark: a `WindowModel` from one chat timeline.

What the window assumes of a stranger is learned here from a training timeline and then measured
by replaying another (`rhythm.py`), so no figure in the report comes from the data it was fitted
on. Fitted, per `bot/core/quiet_window.py`'s definitions:

- the chance that a message is followed by its author's next message in the same channel, with
  nobody between, within `FOLLOW_UP_SECONDS`: for all messages and by how each ends;
- the follow-ups' log-gap: its mean over all follow-ups, and its spread within one person (the
  pooled deviation from each person's own mean, over people with two follow-ups or more).

Gaps shorter than `MIN_GAP_SECONDS` count as that (exports stamp to the second), as the store's
online learning does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.timelines import Said
from bot.core.quiet_window import (
    FOLLOW_UP_SECONDS,
    MIN_GAP_SECONDS,
    MIN_SD,
    Shape,
    WindowModel,
    shape,
)


def follow_up_gaps(timeline: Sequence[Said]) -> list[tuple[Said, float | None]]:
    """Each message with the gap to its follow-up (None: not followed)."""
    previous: dict[str, int] = {}  # channel → index of its latest message
    gaps: list[float | None] = [None] * len(timeline)
    for i, said in enumerate(timeline):
        j = previous.get(said.channel)
        if j is not None and timeline[j].author == said.author:
            gap = said.at - timeline[j].at
            if gap <= FOLLOW_UP_SECONDS:
                gaps[j] = max(gap, MIN_GAP_SECONDS)
        previous[said.channel] = i
    return list(zip(timeline, gaps, strict=True))


def fit(timeline: Sequence[Said]) -> WindowModel:
    pairs = follow_up_gaps(timeline)
    seen: dict[Shape, int] = {"finished": 0, "bare": 0, "dangling": 0, "other": 0}
    split = dict(seen)
    by_person: dict[tuple[str, str], list[float]] = {}
    for said, gap in pairs:
        kind = shape(said.text)
        seen[kind] += 1
        if gap is not None:
            split[kind] += 1
            by_person.setdefault((said.channel, said.author), []).append(math.log(gap))
    logs = [x for xs in by_person.values() for x in xs]
    squares = count = 0.0
    for xs in by_person.values():
        if len(xs) >= 2:
            mean = sum(xs) / len(xs)
            squares += sum((x - mean) ** 2 for x in xs)
            count += len(xs) - 1
    chance = {k: split[k] / max(1, seen[k]) for k in seen}
    return WindowModel(
        split_finished=chance["finished"],
        split_bare=chance["bare"],
        split_dangling=chance["dangling"],
        split_other=chance["other"],
        split_all=sum(split.values()) / max(1, len(pairs)),
        mean_log_gap=sum(logs) / max(1, len(logs)),
        sd_log_gap=max(MIN_SD, math.sqrt(squares / count)) if count else MIN_SD,
    )


def describe_fit(model: WindowModel) -> str:
    return (
        f"follow-up within {FOLLOW_UP_SECONDS:g} s: {100 * model.split_all:.1f} % (finished "
        f"{100 * model.split_finished:.1f} %, bare {100 * model.split_bare:.1f} %, dangling "
        f"{100 * model.split_dangling:.1f} %, other {100 * model.split_other:.1f} %); its gap "
        f"median {math.exp(model.mean_log_gap):.1f} s, spread {model.sd_log_gap:.2f} in log-seconds"
    )
