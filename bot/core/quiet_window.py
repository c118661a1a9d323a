"""The quiet window of a burst: how long to wait after a message before judging its author done.

Pure functions; the store feeds them what it knows and stamps the due time on its own clock (G12).
The window is the one that costs least in expectation (the why and the figures:
docs/quiet-window.md): every second of waiting costs one second to whoever waits, and a follow-up
that comes after the window closed costs `MISSED_FOLLOW_UP_SECONDS` (a draft replaced by a longer
answer, or a second reply to one thought). So the window stays at `min_quiet_seconds` unless the
author's next message is likely enough *and soon enough* to pay for the wait, which takes two
things known of them:

- **How likely a follow-up is** (`WindowModel`: the chance by how the message ends, fitted on chat
  corpora; `Rhythm`: the person's own share of messages followed, learned as they chat, which
  soon outweighs the fitted prior);
- **When it would come** (their follow-ups' log-normal gap: the person's own, learned as they
  chat, shrunk towards the fitted one while they have few).

A stranger's follow-up is never likely enough soon enough to wait for (under any corpus's fit), so
their window is the minimum; a person who reliably writes again a second or two later is held.
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

MISSED_FOLLOW_UP_SECONDS = 10.0
"""What a follow-up that comes after the window closed costs, in seconds of waiting: its author
sees a draft replaced by a longer answer, or two replies to one thought. Not fitted: a judgement
of how much waiting a person would trade to be answered once, and the one knob of the model."""

STEP_SECONDS = 0.1  # the windows compared
PRIOR_MESSAGES = 8.0  # messages' worth of the fitted split chance a person starts with
PRIOR_GAPS = 1.0  # follow-ups' worth of the fitted gap a person starts with
EWMA_FLOOR = 0.1  # the weight of the newest gap once a person has ten or more follow-ups
MIN_SD = 0.2
MIN_GAP_SECONDS = 0.3  # shorter gaps are learned as this (one-second stamps say 0 s)


@dataclass(frozen=True, slots=True)
class WindowModel:
    """What the window assumes of a person it knows nothing of, fitted on chat corpora
    (`benchmarks/window_fit.py`; the defaults: Slack, Gitter and IRC developer communities,
    docs/quiet-window.md): the chance of a follow-up within `FOLLOW_UP_SECONDS` by how the message
    ends, and the follow-ups' log-gap (mean, and its spread within one person)."""

    split_finished: float = 0.046
    split_bare: float = 0.102
    split_dangling: float = 0.140
    split_other: float = 0.057
    split_all: float = 0.079
    mean_log_gap: float = 1.52  # follow-up gaps: median ≈ 4.6 s
    sd_log_gap: float = 0.69

    def split(self, kind: Shape) -> float:
        return {"finished": self.split_finished, "bare": self.split_bare,
                "dangling": self.split_dangling, "other": self.split_other}[kind]  # fmt: skip


DEFAULT_MODEL = WindowModel()


@dataclass(frozen=True, slots=True)
class AdaptiveWindow:
    """An adaptive window's bounds (`[debounce] min_quiet_seconds`, `max_quiet_seconds`) and what it
    assumes of a stranger; a `Timing` without one waits its fixed `quiet_seconds`."""

    min_quiet_seconds: float
    max_quiet_seconds: float
    model: WindowModel = DEFAULT_MODEL


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
    mean_log_gap: float = DEFAULT_MODEL.mean_log_gap
    var_log_gap: float = DEFAULT_MODEL.sd_log_gap**2

    def learn(self, gap: float | None) -> Rhythm:
        """One more message, `gap` seconds after the person's previous one in the same
        conversation with nobody between (None: no such previous message)."""
        if gap is None or gap > FOLLOW_UP_SECONDS:
            return Rhythm(self.messages + 1, self.follow_ups, self.mean_log_gap, self.var_log_gap)
        x = math.log(max(gap, MIN_GAP_SECONDS))
        n = self.follow_ups + 1
        if n == 1:
            return Rhythm(self.messages + 1, 1, x, 0.0)
        alpha = max(1.0 / n, EWMA_FLOOR)
        delta = x - self.mean_log_gap
        mean = self.mean_log_gap + alpha * delta
        var = (1 - alpha) * (self.var_log_gap + alpha * delta * delta)
        return Rhythm(self.messages + 1, n, mean, var)

    def split_chance(self, model: WindowModel) -> float:
        """Chance this person writes again within `FOLLOW_UP_SECONDS` of a message (the fitted
        one for a stranger, their own as they write more)."""
        prior = PRIOR_MESSAGES * model.split_all
        return (self.follow_ups + prior) / (self.messages + PRIOR_MESSAGES)

    def log_gap(self, model: WindowModel) -> tuple[float, float]:
        """Mean and spread of their follow-ups' log-gap (the fitted one while they have few)."""
        n = self.follow_ups
        mean = (n * self.mean_log_gap + PRIOR_GAPS * model.mean_log_gap) / (n + PRIOR_GAPS)
        var = (n * self.var_log_gap + PRIOR_GAPS * model.sd_log_gap**2) / (n + PRIOR_GAPS)
        return mean, max(math.sqrt(var), MIN_SD)


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


def _lognormal_cdf(t: float, mean: float, sd: float) -> float:
    return 0.5 * (1.0 + math.erf((math.log(t) - mean) / (sd * math.sqrt(2.0)))) if t > 0 else 0.0


def cheapest_window(chance: float, mean: float, sd: float, low: float, high: float) -> float:
    """The window in [low, high] of least expected cost, for a follow-up that comes with `chance`
    within `FOLLOW_UP_SECONDS`, its gap log-normal (`mean`, `sd` of the log). Waiting from `low`
    to `w` costs the seconds waited while no follow-up has come; a follow-up that comes in that
    time saves `MISSED_FOLLOW_UP_SECONDS`. So the window grows past `low` only while the
    follow-up's hazard (its density now, given none yet) times that saving exceeds one, summed
    over the windows compared: a likely follow-up a little later still counts."""
    horizon = _lognormal_cdf(FOLLOW_UP_SECONDS, mean, sd)

    def caught(t: float) -> float:  # chance a follow-up has come by `t`
        return chance * min(1.0, _lognormal_cdf(t, mean, sd) / horizon)

    best, best_cost, cost = low, 0.0, 0.0
    steps = math.ceil((high - low) / STEP_SECONDS - 1e-9) if high > low else 0
    for k in range(steps):
        start, end = low + k * STEP_SECONDS, min(high, low + (k + 1) * STEP_SECONDS)
        waited = (end - start) * (1.0 - caught((start + end) / 2))
        cost += waited - MISSED_FOLLOW_UP_SECONDS * (caught(end) - caught(start))
        if cost < best_cost - 1e-9:
            best, best_cost = round(end, 6), cost
    return best


def author_window(
    author: AuthorLast, low: float, high: float, model: WindowModel = DEFAULT_MODEL
) -> Window:
    """The window after one author's last message, counted from that message, between `low` and
    `high` (`min_quiet_seconds` and `max_quiet_seconds`)."""
    kind = shape(author.text)
    ending = _ending(author.text, kind)
    rhythm = author.rhythm or Rhythm()
    # the person's split chance, scaled by how much likelier a follow-up is after this ending
    chance = min(1.0, rhythm.split_chance(model) * model.split(kind) / model.split_all)
    mean, sd = rhythm.log_gap(model)
    seconds = cheapest_window(chance, mean, sd, low, high)
    who = f"{author.name} is new here" if rhythm.messages <= 1 else (
        f"{author.name} writes again within {FOLLOW_UP_SECONDS:.0f} s after about "
        f"{chance:.0%} of such messages")  # fmt: skip
    if seconds > low:
        why = f"{who}, most often {math.exp(mean):.1f} s later: worth waiting for"
    else:
        why = f"{who}: not likely enough soon enough to wait for"
    return Window(seconds, f"{why}; {ending}")


def burst_window(
    authors: Sequence[AuthorLast], low: float, high: float, model: WindowModel = DEFAULT_MODEL
) -> Window:
    """The burst's window from now: it stays open while any of its authors may still be writing,
    and never longer than `max_quiet_seconds` after the newest message (whose age is 0)."""
    if not authors:
        return Window(low, "no pending message")
    windows = ((author_window(author, low, high, model), author) for author in authors)
    window, author = max(windows, key=lambda found: found[0].seconds - found[1].age)
    seconds = max(window.seconds - author.age, 0.0)
    return Window(seconds, f"{window.seconds:.1f} s after {author.name}'s last message: "
                           f"{window.reason}")  # fmt: skip
