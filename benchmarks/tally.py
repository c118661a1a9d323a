"""What a burst workload cost and what the people saw, counted the same way for every system.

Every system posts through `testkit.RecordingFrontend` and answers with `testkit.StreamingModel`,
whose reply names its generation and the messages it covered (`[g7] covers a b c`); the tally
reads those raw posts back, so a duplicate post counts as a duplicate whatever the system did.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.settings import EngineSettings
from testkit import RecordingFrontend, StreamingModel

PLATFORM = "bench"  # the platform name of every benchmark conversation
FIXED_WINDOW = EngineSettings(adaptive=False, speculate=False, streaming=False)
"""The product's defaults with a fixed quiet window, no early start and whole replies: what the
benchmarks measure unless they set these themselves."""


@dataclass(frozen=True)
class Answer:
    """One raw post, read back: which generation wrote it and which messages it covered."""

    generation: int
    covers: tuple[str, ...]


def answer_of(text: str) -> Answer:
    tag, _, ids = text.split(" ", 2)
    return Answer(int(tag.strip("[g]")), tuple(ids.split()))


@dataclass(frozen=True)
class Tally:
    """What a run cost and what the people saw."""

    messages: int
    model_calls: int
    replies: int
    duplicate_replies: int  # replies covering a message an earlier reply already covered
    unanswered: int  # messages no reply covered
    output_tokens: int
    wasted_tokens: int  # output tokens of generations whose text was never posted


def tally(sent: list[str], model: StreamingModel, platform: RecordingFrontend) -> Tally:
    answers = [answer_of(post.text) for post in platform.posts]
    covered: set[str] = set()
    duplicates = 0
    for answer in answers:
        if covered.intersection(answer.covers):
            duplicates += 1
        covered.update(answer.covers)
    posted = {a.generation for a in answers}
    return Tally(
        messages=len(sent),
        model_calls=len(model.calls),
        replies=len(answers),
        duplicate_replies=duplicates,
        unanswered=sum(1 for m in sent if m not in covered),
        output_tokens=sum(c.output_tokens for c in model.calls),
        wasted_tokens=sum(c.output_tokens for c in model.calls if c.id not in posted),
    )
