"""Markdown → mrkdwn, splitting under Slack's limit, neutralising mentions, reading Slack text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.slack.inbound import Identity, Placement, new_message, place, plain_text
from adapters.slack.mrkdwn import split_mrkdwn, to_mrkdwn
from bot.core.events import Attachment, ConversationKey, IncomingMessage

ME = Identity("T1", "UBOT", "BBOT")


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("***both***", "*_both_*"),
        ("~~gone~~", "~gone~"),
        ("[docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|docs>"),
        ("see <https://example.com>", "see <https://example.com>"),
        ("## Heading **x**", "*Heading x*"),
        ("- one\n  * two\n+ three", "• one\n  • two\n• three"),
        ("- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"),
        ("1. first\n2) second", "1. first\n2. second"),
        ("> quoted *text*", "> quoted _text_"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("`x < *y*`", "`x &lt; *y*`"),
        ("2 * 3 * 4 and snake_case_name", "2 * 3 * 4 and snake_case_name"),
        ("```python\nif a < b:\n    **not bold**\n```", "```\nif a &lt; b:\n    **not bold**\n```"),
        ("```\nunclosed", "```\nunclosed\n```"),
        ("---", "──────────"),
    ],
)
def test_markdown_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


@pytest.mark.parametrize(
    "dangerous",
    [
        "<!channel>",
        "<!here>",
        "<!everyone>",
        "<!here|here>",
        "<!subteam^S0123|@devs>",
        "```\n<!channel>\n```",
        "`<!here>`",
        "[<!channel>](https://x.io)",
        "[x](https://x.io/<!here>)",
        "@channel @here @everyone @Here",
    ],
)
def test_model_output_can_never_ping(dangerous: str) -> None:
    out = to_mrkdwn(dangerous)
    assert "<!" not in out
    for word in ("@channel", "@here", "@everyone"):
        assert word not in out.lower()


def test_split_keeps_code_blocks_whole_when_they_fit() -> None:
    prose = "\n".join(f"line {n} " + "x" * 60 for n in range(30))
    code = "```\n" + "\n".join(f"code {n}" for n in range(40)) + "\n```"
    parts = split_mrkdwn(prose + "\n" + code + "\n" + prose, limit=1000)
    assert all(len(p) <= 1000 for p in parts)
    assert any(p.startswith("```") and p.endswith("```") and "code 0" in p and "code 39" in p
               for p in parts) or sum("```" in p for p in parts) == 1  # fmt: skip
    assert [p for p in parts if "code 0" in p] == [p for p in parts if "code 39" in p]


def test_split_reopens_a_code_block_too_long_for_one_part() -> None:
    code = "```\n" + "\n".join(f"print({n})  # " + "y" * 40 for n in range(200)) + "\n```"
    parts = split_mrkdwn("intro\n" + code + "\noutro", limit=1200)
    assert len(parts) > 5
    for part in parts:
        assert len(part) <= 1200
        assert part.count("```") % 2 == 0, part
    joined = "\n".join(parts)
    for n in range(200):
        assert f"print({n})" in joined


def test_split_cuts_a_giant_line_at_spaces_and_not_inside_links_or_entities() -> None:
    line = (
        " ".join(["word"] * 500) + " " + "&amp;" * 300 + " <https://example.com/" + "p" * 50 + ">"
    )
    parts = split_mrkdwn(line, limit=400)
    assert all(len(p) <= 400 for p in parts)
    assert all(p.count("&amp;") * 5 == p.count("&") * 5 for p in parts)
    assert all("&am" not in p.replace("&amp;", "") for p in parts)
    assert any(p.startswith("<https://example.com/") and p.endswith(">") for p in parts)


@given(st.text(alphabet=st.sampled_from("ab *_`<>&#-\n~[]()!@"), max_size=3000))
def test_any_text_splits_into_bounded_balanced_parts(markdown: str) -> None:
    parts = split_mrkdwn(to_mrkdwn(markdown), limit=200)
    for part in parts:
        assert 0 < len(part) <= 200
        assert [line.strip() for line in part.split("\n")].count("```") % 2 == 0
        assert "<!" not in part


def test_plain_text_reads_slack_controls() -> None:
    text = "<@UBOT> ask <@U2|bob> in <#C1|general> about <https://x.io|this> &amp; <!here>"
    assert plain_text(text, ME) == "ask @bob in #general about this (https://x.io) & @here"


@pytest.mark.parametrize(
    ("channel", "channel_type", "message", "mentioned", "thread", "check"),
    [
        ("D1", "im", {"ts": "1.0"}, False, "", False),
        ("D1", "im", {"ts": "2.0", "thread_ts": "1.0"}, False, "1.0", False),
        ("C1", "channel", {"ts": "1.0", "text": "<@UBOT> hi"}, False, "1.0", False),
        ("C1", "channel", {"ts": "2.0", "thread_ts": "1.0"}, True, "1.0", False),
        ("C1", "channel", {"ts": "2.0", "thread_ts": "1.0"}, False, "1.0", True),
        ("C9", "channel", {"ts": "1.0", "text": "<@UBOT> hi"}, True, "", False),
    ],
)
def test_placement(
    channel: str, channel_type: str, message: dict[str, str], mentioned: bool, thread: str,
    check: bool,
) -> None:  # fmt: skip
    placement = place("T1", channel, channel_type, message, ME, {"C9"}, mentioned)
    assert placement is not None
    assert (placement.key.thread, placement.needs_thread_check) == (thread, check)


def test_plain_channel_message_does_not_count() -> None:
    assert place("T1", "C1", "channel", {"ts": "1.0", "text": "hi"}, ME, set()) is None
    other_user = {"ts": "1.0", "text": "ask <@UBOT2> or <@UBOTX|x>"}
    assert place("T1", "C1", "channel", other_user, ME, set()) is None
    labelled = {"ts": "1.0", "text": "hey <@UBOT|burstbot>"}
    assert place("T1", "C1", "channel", labelled, ME, set()) is not None


def test_shared_files_become_attachments_of_the_message() -> None:
    placement = Placement(ConversationKey("slack", "T1", "D1"))
    graph = {"id": "F1", "name": "graph.png", "mimetype": "image/png", "size": 2048,
             "url_private_download": "https://files.slack.com/F1/graph.png", "original_w": 640,
             "original_h": 480}  # fmt: skip
    event = {"ts": "1.5", "user": "U1", "text": "look", "subtype": "file_share",
             "files": [graph, {"title": "notes"}]}  # fmt: skip
    message = new_message(placement, "D1", event, ME)
    assert isinstance(message, IncomingMessage)
    assert (message.message_id, message.text) == ("D1:1.5", "look")
    assert message.attachments == (
        Attachment("F1", "graph.png", "image/png", 2048, graph["url_private_download"], 640, 480),
        Attachment("1.5#1", "notes", "", 0, ""),
    )


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("[hey](@U123)", "hey (@U123)"),
        ("[hey](<@U456>)", "hey (@U456)"),
        ("[d](!group)", "d (!group)"),
        ("[d](<!subteam^S1|devs>)", "d (!subteam%5ES1%7Cdevs)"),
        ("[here](<!here>)", "here (!here)"),
        ("[rel](/path) [frag](#top)", "rel (/path) frag (#top)"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("<javascript:alert(1)>", "&lt;javascript:alert(1)&gt;"),
        ("[x](data:text/html,hi)", "[x](data:text/html,hi)"),
        ("![i](data:image/png;base64,AA)", "i (data:image/png;base64,AA)"),
        ("[mail](mailto:a@b.io) <a@b.io>", "<mailto:a@b.io|mail> <mailto:a@b.io|a@b.io>"),
        ("![chart](https://x.io/c.png)", "<https://x.io/c.png|chart>"),
        (
            "[Python](https://en.wikipedia.org/wiki/Python_(programming_language))",
            "<https://en.wikipedia.org/wiki/Python_(programming_language)|Python>",
        ),
        (
            "see https://en.wikipedia.org/wiki/Python_(programming_language).",
            "see <https://en.wikipedia.org/wiki/Python_(programming_language)>.",
        ),
        ("[a|b](https://x.io/a|b)", "<https://x.io/a%7Cb|a/b>"),
        ("hi <@U999> <#C1> <!date^1|x>", "hi &lt;@U999&gt; &lt;#C1&gt; &lt;!date^1|x&gt;"),
    ],
)  # fmt: skip
def test_only_http_and_mailto_targets_become_links(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_tables_become_aligned_code_blocks() -> None:
    table = "| name | qty |\n|:--|--:|\n| apple | 3 |\n| **kiwi** <x> | 12 |"
    assert to_mrkdwn("Stock:\n\n" + table) == (
        "Stock:\n\n```\nname     | qty\n---------+----\napple    |   3\nkiwi &lt;x&gt; |  12\n```"
    )


def test_blank_lines_between_blocks_are_kept() -> None:
    assert (
        to_mrkdwn("one\ntwo\n\nthree\n\n- a\n- b\n\n> q") == "one\ntwo\n\nthree\n\n• a\n• b\n\n> q"
    )


_PIECES = ["<", ">", "@U1", "!here", "!channel", "|", "[", "]", "(", ")", "http://a.io",
           "https://x.io/(y)", "mailto:a@b.io", "javascript:x", "data:x", " ", "\n", "*", "_",
           "`", "#", "-", "!", "&", "x", "^", "subteam", "@here"]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_every_angle_bracket_in_the_output_is_an_allowed_link(pieces: list[str]) -> None:
    out = to_mrkdwn("".join(pieces))
    for at in (i for i, ch in enumerate(out) if ch == "<"):
        assert out.startswith(("<http://", "<https://", "<mailto:"), at), out
    text = re.sub(r"<[^>]*>", "", out).lower()  # what is shown as text, links left out
    assert "@here" not in text and "@channel" not in text
