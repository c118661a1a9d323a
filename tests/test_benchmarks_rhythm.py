"""The felt-latency benchmark (`--only rhythm`): its readers, its replay and its report section.

The replay is checked on hand-made timelines whose answers are known; speed is not asserted."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.rhythm import BEGIN, END, Policy, Supersede, replay, splice
from benchmarks.timelines import HABITS, Said, episodes, generate, read
from benchmarks.window_fit import fit
from bot.core.quiet_window import shape

NO_WAIT = Policy("no wait", {"adaptive": False, "quiet_seconds": 0.0})
FIXED = Policy("fixed", {"adaptive": False, "quiet_seconds": 1.5})
GITTER = """[2024-01-01 10:00:00] <ann> so I tried the build
and it failed
[2024-01-01 10:00:02] <ann> any idea?
[2024-01-01 10:00:05] <ci-bot> build #12 failed
[2024-01-01 10:01:00] <ben> did you clear the cache?
"""
SLACK = """<root><message conversation_id="1"><ts>2024-01-01T10:00:00.000100</ts><user>Cy</user>
<text>hello &amp; welcome</text></message>
<message conversation_id="1"><ts>2024-01-01T10:00:03.000200</ts><user>Di</user>
<text>thanks!</text></message></root>
"""
IRC = """rust 2018-05-29 [21:20:37] <talchas> but I don't know
rust 2018-05-29 [21:20:39] -eval- []
rust 2018-05-29 [21:20:40] * talchas shrugs
rust 2018-05-29 [21:20:48] <wikibugs> task closed
"""


def test_the_export_formats_are_read_in_time_order_without_bots(tmp_path: Path) -> None:
    (tmp_path / "room.txt").write_text(GITTER, encoding="utf-8")
    (tmp_path / "chan.xml").write_text(SLACK, encoding="utf-8")
    (tmp_path / "rust.txt").write_text(IRC, encoding="utf-8")
    (tmp_path / "LICENSE-data.txt").write_text("CC-BY-4.0\n", encoding="utf-8")
    said = read([str(tmp_path)], limit=100)
    assert [(s.at, s.channel, s.author, s.text) for s in said] == [
        (0.0, "chan", "Cy", "hello & welcome"),
        (0.0, "room", "ann", "so I tried the build\nand it failed"),
        (0.0, "rust", "talchas", "but I don't know"),
        (2.0, "room", "ann", "any idea?"),
        (3.0, "chan", "Di", "thanks!"),
        (3.0, "rust", "talchas", "shrugs"),
        (60.0, "room", "ben", "did you clear the cache?"),
    ]
    assert len(read([str(tmp_path / "room.txt")], limit=2)) == 2
    with pytest.raises(SystemExit, match="no such file"):
        read([str(tmp_path / "missing")], limit=1)


def test_episodes_are_a_persons_runs_under_30_s() -> None:
    said = [Said(0, "c", "a", "x"), Said(10, "c", "a", "y"), Said(15, "c", "b", "z"),
            Said(50, "c", "a", "w")]  # fmt: skip
    assert episodes(said) == [[0, 1], [2], [3]]


def test_the_generator_is_seeded_and_sized_and_writes_with_each_habit() -> None:
    assert generate(4, 40, seed=1) == generate(4, 40, seed=1)
    assert len(generate(4, 40, seed=1)) == 40
    bare = generate(4, 400, seed=1, habit="no punctuation at all")
    assert not any(s.text.rstrip()[-1] in ".?!," for s in bare)
    assert all(s.text == s.text.lower() for s in generate(4, 40, seed=1, habit="all lowercase"))
    whole = generate(4, 400, seed=1, habit="one thought per message")
    assert {shape(s.text) for s in whole} == {"finished"}
    assert set(HABITS) >= {"no punctuation at all", "all lowercase", "one thought per message"}


def test_the_fit_counts_follow_ups_by_ending_and_their_gaps_within_a_person() -> None:
    said = [
        Said(0, "c", "a", "so,"), Said(2, "c", "a", "then"),  # a dangling end, followed 2 s on
        Said(100, "c", "a", "so,"), Said(108, "c", "a", "ok."),  # followed 8 s on
        Said(200, "c", "a", "so,"), Said(201, "c", "b", "hi"), Said(202, "c", "a", "x"),
        Said(300, "c", "b", "done."), Said(330, "c", "b", "later."),  # 30 s: not a follow-up
    ]  # fmt: skip
    model = fit(said)
    assert model.split_dangling == pytest.approx(2 / 3)  # the third had b in between
    assert model.split_all == pytest.approx(2 / 9)
    assert model.split_finished == 0.0
    assert model.mean_log_gap == pytest.approx((math.log(2) + math.log(8)) / 2)
    assert model.sd_log_gap == pytest.approx(math.log(4) / math.sqrt(2))


async def test_replay_measures_what_each_policy_makes_a_person_wait() -> None:
    lone = [Said(100.0 * n, f"dm{n}", f"p{n}", "is it down?") for n in range(3)]
    quick = await replay(NO_WAIT, lone, 0.8, 0.02, 10)
    fixed = await replay(
        Policy("f", {"adaptive": False, "quiet_seconds": 1.5}), lone, 0.8, 0.02, 10
    )
    adaptive = await replay(Policy("a", {"adaptive": True}), lone, 0.8, 0.02, 10)
    assert quick.felt == pytest.approx([0.8] * 3)
    assert fixed.felt == pytest.approx([2.3] * 3)
    assert adaptive.felt == pytest.approx([0.5 + 0.8] * 3)  # strangers: the minimum
    assert (fixed.replies, fixed.requests, fixed.wasted_tokens) == (3, 3, 0)


async def test_overlapping_generations_of_two_people_are_told_apart() -> None:
    said = [Said(0.0, "dm1", "p1", "is it down?"), Said(0.5, "dm2", "p2", "and mine?")]
    both = await replay(NO_WAIT, said, 0.8, 0.1, 20)  # the first streams until 2.7 s
    assert (both.replies, both.requests, both.wasted_tokens) == (2, 2, 0)
    assert both.felt == pytest.approx([0.8, 0.8])


async def test_replay_counts_a_visible_supersede_and_its_wasted_tokens() -> None:
    # the follow-up lands 1 s into the stream of the first reply (shown at 0.8 s): superseded
    said = [Said(0.0, "dm", "p", "is it down?"), Said(1.8, "dm", "p", "or just slow?")]
    quick = await replay(NO_WAIT, said, 0.8, 0.1, 50)
    assert quick.visible_supersedes == 1 and quick.requests == 2 and quick.replies == 1
    assert quick.wasted_tokens == 11  # tokens at 0.8, 0.9, ... 1.8 s
    assert quick.multi_episodes == 1 and quick.multi_answered == 0
    assert quick.felt == pytest.approx([0.8])
    assert quick.superseded_by == [Supersede(same_author=True, gap=pytest.approx(1.8))]
    assert quick.supersedes_by_cause() == "1: same author 1, another person 0; after 1-2 s: 1"
    modeled = await replay(Policy("s", {"adaptive": False, "quiet_seconds": 1.5}, 0.3),
                           [Said(0.0, "dm", "p", "so"), Said(1.4, "dm", "p", "it is down")],
                           0.8, 0.1, 50)  # fmt: skip
    assert modeled.requests == 2 and modeled.visible_supersedes == 0  # cancelled unseen
    assert modeled.wasted_tokens == 4  # speculation from 0.3 s: tokens at 1.1 ... 1.4 s
    assert modeled.felt == pytest.approx([1.5])  # shown at the close: the first token was ready


async def test_a_supersede_by_someone_else_is_told_from_the_authors_own() -> None:
    # another person writes in the same conversation 1.5 s into the first reply's stream
    said = [Said(0.0, "ch", "p", "is it down?"), Said(2.3, "ch", "q", "same here")]
    quick = await replay(NO_WAIT, said, 0.8, 0.1, 50)
    assert quick.superseded_by == [Supersede(same_author=False, gap=pytest.approx(2.3))]
    assert quick.supersedes_by_cause() == "1: same author 0, another person 1; after 2-3 s: 1"


def test_policies_chooses_what_is_replayed_beside_the_fixed_window(tmp_path: Path) -> None:
    arguments = ["--quick", "--only", "rhythm", "--policies", "adaptive", "--out", str(tmp_path)]
    assert main(arguments) == 0
    body = (tmp_path / "benchmarks.md").read_text(encoding="utf-8").split(BEGIN, 1)[1]
    rows = [line for line in body.splitlines() if line.startswith("| ") and "policy" not in line]
    assert [r.split("|")[1].strip() for r in rows] == [
        "fixed 1.5 s", "adaptive + speculation, fitted on the shipped defaults",
    ] * len(HABITS)  # fmt: skip
    assert body.count("Visible supersedes by cause:") == len(HABITS)
    with pytest.raises(SystemExit):
        main(["--quick", "--only", "rhythm", "--policies", "adaptive,sometimes"])


def test_only_rhythm_writes_its_section_into_the_report(tmp_path: Path) -> None:
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\nearlier tables\n", encoding="utf-8")
    assert main(["--quick", "--only", "rhythm", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "benchmarks.md").read_text(encoding="utf-8")
    assert report.startswith("# Benchmarks\n\nearlier tables\n")
    body = report.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and "policy" not in line]
    assert [r.split("|")[1].strip() for r in rows] == [
        "fixed 1.5 s", "fixed 1.5 s + speculation",
        "adaptive + speculation, fitted on the shipped defaults",
    ] * len(HABITS)  # fmt: skip
    assert body.count("**met**") + body.count("**not met**") == 7 * len(HABITS)
    assert "felt p99" in body and "waited > 3 s" in body
    assert (tmp_path / "benchmarks-rhythm.png").read_bytes().startswith(b"\x89PNG")
    again = splice(report, f"{BEGIN}\nnew\n{END}\n")
    assert again.count(BEGIN) == 1 and "\nnew\n" in again and "earlier tables" in again


def test_replay_runs_inside_one_event_loop_each_time() -> None:
    said = [Said(0.0, "dm", "p", "ok?")]
    first = asyncio.run(replay(NO_WAIT, said, 0.8, 0.02, 5))
    second = asyncio.run(replay(NO_WAIT, said, 0.8, 0.02, 5))
    assert first.felt == second.felt == pytest.approx([0.8])
