"""The quiet window of a burst: how long to wait after a message before judging its author done.

Pure functions; the store feeds them what it knows and stamps the due time on its own clock (G12).
Two things predict whether a person writes again soon, both fitted on two public chat corpora
(the figures and what they buy: docs/quiet-window.md):

- **How the message ends** (`shape`): a dangling end is followed about three times as often as a
  finished one. `SHAPE_WINDOW` spends the wait where follow-ups are likelier, and a finished
  message closes at `min_quiet_seconds`.
- **The person's own rhythm** (`Rhythm`: four numbers per person, updated at each of their
  messages): a person who splits often gets a window that holds their own follow-ups (their
  log-gap mean + one sd), and one who never does closes sooner than a stranger.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Shape = Literal["finished", "bare", "dangling", "other"]

FOLLOW_UP_SECONDS = 10.0
"""A gap up to this long between a person's consecutive messages is a follow-up (one thought)."""

POPULATION_SPLIT = {"finished": 0.036, "bare": 0.083, "dangling": 0.107, "other": 0.056}
"""The corpora's chance of a follow-up within `FOLLOW_UP_SECONDS`, by how the message ends."""
POPULATION_SPLIT_ALL = 0.065
POPULATION_MEAN_LOG_GAP = 1.55  # follow-up gaps: median ≈ 4.7 s
POPULATION_SD_LOG_GAP = 0.53  # within one person

SHAPE_WINDOW: dict[Shape, float] = {"finished": 0.0, "other": 0.0, "bare": 1.0, "dangling": 3.0}
"""A stranger's window by the message's shape (0 = `min_quiet_seconds`), before the bounds."""

PRIOR_MESSAGES = 8.0  # messages' worth of the population's split chance a person starts with
PRIOR_GAPS = 1.0  # follow-ups' worth of the population's gap a person starts with
SPLITTER = 0.12  # a split chance from here on: the window holds the person's own follow-ups
EWMA_FLOOR = 0.1  # the weight of the newest gap once a person has ten or more follow-ups
MIN_SD = 0.2

# fmt: off
_CONJUNCTIONS = frozenset({
    "and", "but", "or", "because", "cause", "cuz", "coz", "bc", "nor", "if", "when", "while",
    "although", "unless", "until", "whereas", "which", "than", "the", "a", "an", "to", "of", "with",
    "from", "my", "your", "our", "their", "plus", "so",
})
# fmt: on
_EMOJI_END = re.compile(
    "[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\u2300-\u23ff\ufe0f\u200d]$"
    r"|:[A-Za-z0-9_+\-]{1,40}:$|<a?:\w+:\d+>$|(?:^|\s)(?:[:;=][\-']?[)(\]\[DPp/|*]+|<3+|\^\^)$"
)
_LINK_OR_CODE_END = re.compile(r"(https?://\S+|<https?://[^>]*>|`)$")


@dataclass(frozen=True, slots=True)
class Rhythm:
    """What the store keeps of one person: how many messages, how many were follow-ups, and the
    exponentially weighted mean and variance of their follow-ups' log-gap."""

    messages: int = 0
    follow_ups: int = 0
    mean_log_gap: float = POPULATION_MEAN_LOG_GAP
    var_log_gap: float = POPULATION_SD_LOG_GAP**2

    def learn(self, gap: float | None) -> Rhythm:
        """One more message, `gap` seconds after the person's previous one in the same
        conversation with nobody between (None: no such previous message)."""
        if gap is None or gap > FOLLOW_UP_SECONDS:
            return Rhythm(self.messages + 1, self.follow_ups, self.mean_log_gap, self.var_log_gap)
        x = math.log(max(gap, 0.05))
        n = self.follow_ups + 1
        if n == 1:
            return Rhythm(self.messages + 1, 1, x, 0.0)
        alpha = max(1.0 / n, EWMA_FLOOR)
        delta = x - self.mean_log_gap
        mean = self.mean_log_gap + alpha * delta
        var = (1 - alpha) * (self.var_log_gap + alpha * delta * delta)
        return Rhythm(self.messages + 1, n, mean, var)

    def split_chance(self) -> float:
        """Chance this person writes again within `FOLLOW_UP_SECONDS` of a message (the
        population's for a stranger, their own as they write more)."""
        prior = PRIOR_MESSAGES * POPULATION_SPLIT_ALL
        return (self.follow_ups + prior) / (self.messages + PRIOR_MESSAGES)

    def follow_up_within(self) -> float:
        """Seconds within which most (mean + one sd of log-gap) of their follow-ups come."""
        n = self.follow_ups
        mean = (n * self.mean_log_gap + PRIOR_GAPS * POPULATION_MEAN_LOG_GAP) / (n + PRIOR_GAPS)
        var = (n * self.var_log_gap + PRIOR_GAPS * POPULATION_SD_LOG_GAP**2) / (n + PRIOR_GAPS)
        return math.exp(mean + max(math.sqrt(var), MIN_SD))


@dataclass(frozen=True, slots=True)
class AuthorLast:
    """One author of an open burst: their last pending message and what is known of them."""

    name: str
    text: str
    age: float  # seconds since that message, on the store's clock
    rhythm: Rhythm | None  # None: never seen before


@dataclass(frozen=True, slots=True)
class Window:
    """The quiet window from now, and why (`explain` shows `reason`)."""

    seconds: float
    reason: str


def shape(text: str) -> Shape:
    """How a message ends, in the corpora's classes."""
    t = text.strip()
    if not t or _LINK_OR_CODE_END.search(t):
        return "other"
    if _EMOJI_END.search(t):
        return "finished"
    if t.endswith(("...", "…", "..")):
        return "dangling"
    core = t.rstrip(")]}\"'”’*_~ ")
    if not core:
        return "bare"
    if core[-1] in ".?!":
        return "finished"
    if core[-1] in ",;:-–—(&+/\\":
        return "dangling"
    words = re.findall(r"[A-Za-z']+", core.lower())
    return "dangling" if words and words[-1] in _CONJUNCTIONS else "bare"


def _ending(text: str, kind: Shape) -> str:
    last = text.strip()[-1:] or " "
    if kind == "finished":
        return f"the message ended with {last!r}" if last in ".?!" else "the message ended finished"
    if kind == "dangling":
        return f"the message trailed off ({text.strip()[-3:]!r})"
    if kind == "other":
        return "the message ended with a link or code"
    return "the message ended without punctuation"


def author_window(author: AuthorLast, low: float, high: float) -> Window:
    """The window after one author's last message, counted from that message, between `low` and
    `high` (`min_quiet_seconds` and `max_quiet_seconds`)."""
    kind = shape(author.text)
    base = max(low, SHAPE_WINDOW[kind])
    ending = _ending(author.text, kind)
    if author.rhythm is None or author.rhythm.messages <= 1:
        seconds = min(high, base)
        return Window(seconds, f"{author.name} is new here; {ending}")
    rhythm = author.rhythm
    chance = min(1.0, rhythm.split_chance() * POPULATION_SPLIT[kind] / POPULATION_SPLIT_ALL)
    if chance >= SPLITTER:
        own = rhythm.follow_up_within()
        seconds = min(high, max(base, own))
        return Window(seconds, f"{author.name}'s follow-ups come within {own:.1f} s; {ending}")
    # a rare splitter: the stranger's window shrinks with their split chance, down to the minimum
    share = min(1.0, chance / POPULATION_SPLIT[kind])
    seconds = min(high, low + (base - low) * share)
    how = "never writes again" if rhythm.follow_ups == 0 else "rarely writes again"
    return Window(
        seconds, f"{author.name} {how} within {FOLLOW_UP_SECONDS:.0f} s ({rhythm.messages} "
        f"messages); {ending}"
    )  # fmt: skip


def burst_window(authors: Sequence[AuthorLast], low: float, high: float) -> Window:
    """The burst's window from now: it stays open while any of its authors may still be writing,
    and never longer than `max_quiet_seconds` after the newest message (whose age is 0)."""
    if not authors:
        return Window(low, "no pending message")
    windows = ((author_window(author, low, high), author) for author in authors)
    window, author = max(windows, key=lambda found: found[0].seconds - found[1].age)
    seconds = max(window.seconds - author.age, 0.0)
    return Window(seconds, f"{window.seconds:.1f} s after {author.name}'s last message: "
                           f"{window.reason}")  # fmt: skip
