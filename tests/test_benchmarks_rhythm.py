"""The felt-latency benchmark (`--only rhythm`): its readers, its replay and its report section.

The replay is checked on hand-made timelines whose answers are known; speed is not asserted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.rhythm import BEGIN, END, Policy, replay, splice
from benchmarks.timelines import Said, episodes, generate, read

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


def test_both_export_formats_are_read_in_time_order_without_bots(tmp_path: Path) -> None:
    (tmp_path / "room.txt").write_text(GITTER, encoding="utf-8")
    (tmp_path / "chan.xml").write_text(SLACK, encoding="utf-8")
    said = read([str(tmp_path)], limit=100)
    assert [(s.at, s.channel, s.author, s.text) for s in said] == [
        (0.0, "chan", "Cy", "hello & welcome"),
        (0.0, "room", "ann", "so I tried the build\nand it failed"),
        (2.0, "room", "ann", "any idea?"),
        (3.0, "chan", "Di", "thanks!"),
        (60.0, "room", "ben", "did you clear the cache?"),
    ]
    assert len(read([str(tmp_path / "room.txt")], limit=2)) == 2
    with pytest.raises(SystemExit, match="no such file"):
        read([str(tmp_path / "missing")], limit=1)


def test_episodes_are_a_persons_runs_under_30_s() -> None:
    said = [Said(0, "c", "a", "x"), Said(10, "c", "a", "y"), Said(15, "c", "b", "z"),
            Said(50, "c", "a", "w")]  # fmt: skip
    assert episodes(said) == [[0, 1], [2], [3]]


def test_the_generator_is_seeded_and_sized() -> None:
    assert generate(4, 40, seed=1) == generate(4, 40, seed=1)
    assert len(generate(4, 40, seed=1)) == 40


async def test_replay_measures_what_each_policy_makes_a_person_wait() -> None:
    lone = [Said(100.0 * n, f"dm{n}", f"p{n}", "is it down?") for n in range(3)]
    quick = await replay(NO_WAIT, lone, 0.8, 0.02, 10)
    fixed = await replay(
        Policy("f", {"adaptive": False, "quiet_seconds": 1.5}), lone, 0.8, 0.02, 10
    )
    adaptive = await replay(Policy("a", {"adaptive": True}), lone, 0.8, 0.02, 10)
    assert quick.felt == pytest.approx([0.8] * 3)
    assert fixed.felt == pytest.approx([2.3] * 3)
    assert adaptive.felt == pytest.approx([0.5 + 0.8] * 3)  # strangers, finished: the minimum
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
    modeled = await replay(Policy("s", {"adaptive": False, "quiet_seconds": 1.5}, 0.3),
                           [Said(0.0, "dm", "p", "so"), Said(1.4, "dm", "p", "it is down")],
                           0.8, 0.1, 50)  # fmt: skip
    assert modeled.requests == 2 and modeled.visible_supersedes == 0  # cancelled unseen
    assert modeled.wasted_tokens == 4  # speculation from 0.3 s: tokens at 1.1 ... 1.4 s
    assert modeled.felt == pytest.approx([1.5])  # shown at the close: the first token was ready


def test_only_rhythm_writes_its_section_into_the_report(tmp_path: Path) -> None:
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\nearlier tables\n", encoding="utf-8")
    assert main(["--quick", "--only", "rhythm", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "benchmarks.md").read_text(encoding="utf-8")
    assert report.startswith("# Benchmarks\n\nearlier tables\n")
    body = report.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ")][1:]
    assert [r.split("|")[1].strip() for r in rows] == [
        "no wait", "fixed 1.5 s", "fixed 1.5 s + speculation", "adaptive + speculation"
    ]  # fmt: skip
    assert body.count("**met**") + body.count("**not met**") == 5
    assert (tmp_path / "benchmarks-rhythm.png").read_bytes().startswith(b"\x89PNG")
    again = splice(report, f"{BEGIN}\nnew\n{END}\n")
    assert again.count(BEGIN) == 1 and "\nnew\n" in again and "earlier tables" in again


def test_replay_runs_inside_one_event_loop_each_time() -> None:
    said = [Said(0.0, "dm", "p", "ok?")]
    first = asyncio.run(replay(NO_WAIT, said, 0.8, 0.02, 5))
    second = asyncio.run(replay(NO_WAIT, said, 0.8, 0.02, 5))
    assert first.felt == second.felt == pytest.approx([0.8])
