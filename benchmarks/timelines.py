"""Message timelines for the felt-latency benchmark: read from chat exports, or generated.

Three export formats are read (`--timing PATH...`; a directory is searched for all three):

- Gitter text, one message a line: `[YYYY-MM-DD HH:MM:SS] <nick> text`; a line without that
  prefix continues the message above;
- IRC text, one message a line: `channel YYYY-MM-DD [HH:MM:SS] <nick> text` (or `* nick action`);
  other lines (a bot's output) are left out;
- Slack XML (the disentangled-chat exports): `<message><ts>ISO time</ts><user>..</user>
  <text>..</text></message>`; the fraction of `ts` is a sequence counter, not time, and dropped.

Each file is one channel; bots (names ending in `bot`, `-bot`, `-wm`, and `wikibugs`) are left
out. Nothing read is kept
beyond the run.

Without files, `generate` draws timelines from a model fitted on two such corpora (Slack and
Gitter developer communities, ~80,000 human messages, 5,300 people, 1 s stamps). Its parameters:

- a person's messages come in episodes; between episodes they are silent for an exponential
  time (mean 20 min);
- after each message the person writes again within 10 s with their own chance `split`, drawn
  per person from Beta(0.9, 9) (mean 9 %: the corpora's per-person share of messages followed
  within 10 s has median 4-8 %, p90 14-25 %), scaled by how the message ends (x0.55 finished,
  x1.28 bare, x1.65 dangling, x0.86 other: the corpora's 3.6 %, 8.3 %, 10.7 %, 5.6 % against
  6.5 % for all); such a follow-up's gap is log-normal around the person's own median (log-median
  drawn from N(1.55, 0.25), within-person sd 0.53; capped at 10 s);
- otherwise, with chance 0.45, they write again later in the same episode after a log-normal
  gap (log-median 2.9 ≈ 18 s, sd 0.45, 10-30 s: the corpora's same-author gaps of 10-30 s);
  else the episode ends;
- how a message ends is drawn from the corpora's mix: 40 % finished, 45 % bare, 3 % dangling,
  12 % other.
"""

from __future__ import annotations

import html
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot.core.quiet_window import shape


@dataclass(frozen=True, slots=True)
class Said:
    at: float  # seconds from the timeline's start
    channel: str
    author: str
    text: str


_GITTER = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] <([^>]+)> ?(.*)$")
_XML = re.compile(
    r"<message[^>]*>\s*<ts>(.*?)</ts>\s*<user>(.*?)</user>\s*<text>(.*?)</text>\s*</message>", re.S
)
_IRC = re.compile(r"^\S+ (\d{4}-\d\d-\d\d) \[(\d\d:\d\d:\d\d)\] (?:<([^>]+)>|\* (\S+)) ?(.*)$")
_IRC_OTHER = re.compile(r"^\S+ \d{4}-\d\d-\d\d \[")  # an IRC line of a bot's or the server's
_BOT = re.compile(r"(?i)(^matrixbot$|^jsbot$|(?<!ro)bot$|-bot\b|\[bot\]|-wm$|^wikibugs$)")


def _stamp(day_and_time: str) -> float:
    return datetime.strptime(day_and_time, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def _text_lines(path: Path) -> list[tuple[float, str, str]]:
    """Gitter or IRC lines (told apart line by line)."""
    out: list[list[object]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := _GITTER.match(line):
            out.append([_stamp(m.group(1)), m.group(2), m.group(3)])
        elif m := _IRC.match(line):
            out.append([_stamp(f"{m.group(1)} {m.group(2)}"), m.group(3) or m.group(4), m.group(5)])
        elif out and not _IRC_OTHER.match(line):
            out[-1][2] = f"{out[-1][2]}\n{line}"
    return [(float(str(t)), str(a), str(x)) for t, a, x in out]


def _slack_xml(path: Path) -> list[tuple[float, str, str]]:
    out = []
    for m in _XML.finditer(path.read_text(encoding="utf-8", errors="replace")):
        at = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC).timestamp()
        out.append((float(int(at)), html.unescape(m.group(2)), html.unescape(m.group(3))))
    return out


def _files(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*")
                if p.suffix in (".txt", ".xml") and "LICENSE" not in p.name
            )
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"--timing: no such file or directory: {name}")
    return found


def read(paths: Sequence[str], limit: int) -> list[Said]:
    """Every file's human messages in time order, its channel named after the file; up to `limit`
    messages in all, the same share from each file (its first ones), all files laid side by side
    from time 0."""
    said: list[Said] = []
    files = _files(paths)
    each = math.ceil(limit / max(1, len(files)))
    for path in files:
        rows = _slack_xml(path) if path.suffix == ".xml" else _text_lines(path)
        rows = sorted(set(rows), key=lambda r: r[0])
        human = [r for r in rows if not _BOT.search(r[1])][:each]
        if not human:
            continue
        start = human[0][0]
        said += [Said(t - start, path.stem, a, x) for t, a, x in human]
    said.sort(key=lambda s: s.at)
    return said


SPLIT_BY_SHAPE = {"finished": 0.55, "bare": 1.28, "dangling": 1.65, "other": 0.86}
TEXTS = {"finished": "Is it down?", "bare": "So I tried", "dangling": "And then,", "other": "`x`"}
MIX = (("finished", 0.40), ("bare", 0.45), ("dangling", 0.03), ("other", 0.12))
HABITS = {
    # how people write: the text each drawn ending is written as (their follow-ups do not change)
    "mixed": TEXTS,
    "no punctuation at all": {"finished": "is it down", "bare": "so I tried",
                              "dangling": "and then", "other": "see x"},
    "all lowercase": {k: v.lower() for k, v in TEXTS.items()},
    "one thought per message": {k: "Is it down?" for k in TEXTS},
}  # fmt: skip
"""Punctuation habits of the generated timelines: the window must hold whichever people have.
`one thought per message` also splits as rarely as after a finished message."""


def _ending(rng: random.Random) -> str:
    x, total = rng.random(), 0.0
    for kind, share in MIX:
        total += share
        if x < total:
            return kind
    return "other"


def generate(people: int, messages: int, seed: int, habit: str = "mixed") -> list[Said]:
    """`messages` messages from `people` people, each person in their own conversation, written
    with one of `HABITS`."""
    rng = random.Random(seed)
    texts = HABITS[habit]
    whole = habit == "one thought per message"
    per_person = max(1, messages // people)
    said: list[Said] = []
    for p in range(people):
        split = rng.betavariate(0.9, 9.0)
        log_median = rng.gauss(1.55, 0.25)
        at = rng.expovariate(1 / 600.0)
        for _ in range(per_person):
            kind = "finished" if whole else _ending(rng)
            said.append(Said(at, f"dm{p}", f"p{p}", texts[kind]))
            if rng.random() < min(1.0, split * SPLIT_BY_SHAPE[kind]):
                at += min(10.0, max(0.3, math.exp(rng.gauss(log_median, 0.53))))
            elif rng.random() < 0.45:
                at += min(30.0, max(10.0, math.exp(rng.gauss(2.9, 0.45))))
            else:
                at += rng.expovariate(1 / 1200.0)
    said.sort(key=lambda s: s.at)
    return said


def episodes(timeline: Iterable[Said], gap: float = 30.0) -> list[list[int]]:
    """Each person's runs of messages in one channel less than `gap` seconds apart (indices)."""
    last: dict[tuple[str, str], tuple[float, list[int]]] = {}
    runs: list[list[int]] = []
    for i, s in enumerate(timeline):
        who = (s.channel, s.author)
        seen = last.get(who)
        if seen is not None and s.at - seen[0] < gap:
            seen[1].append(i)
            last[who] = (s.at, seen[1])
        else:
            run = [i]
            runs.append(run)
            last[who] = (s.at, run)
    return runs


def describe(timeline: Sequence[Said]) -> str:
    kinds: dict[str, int] = {}
    for s in timeline:
        kinds[shape(s.text)] = kinds.get(shape(s.text), 0) + 1
    people = len({(s.channel, s.author) for s in timeline})
    mix = ", ".join(f"{k} {100 * v / len(timeline):.0f} %" for k, v in sorted(kinds.items()))
    return f"{len(timeline)} messages, {people} people, {len({s.channel for s in timeline})} " \
        f"channels; endings: {mix}"  # fmt: skip
