"""Splitting replies for Discord's 2000-character limit, nonces and allowed mentions."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.discord.render import (
    MESSAGE_LIMIT,
    allowed_mentions,
    nonce_for,
    split_message,
    to_discord,
)

DISCORD_NONCE_LIMIT = 25
"""Discord refuses a message nonce longer than this."""


def fence_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("```"))


def visible(text: str) -> str:
    """The text without fence lines and whitespace: what splitting must never lose or add."""
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("```")]
    return re.sub(r"\s+", "", "".join(kept))


def test_a_short_reply_is_one_part() -> None:
    assert split_message("hello\n\nworld") == ["hello\n\nworld"]
    assert split_message("x" * MESSAGE_LIMIT) == ["x" * MESSAGE_LIMIT]


def test_paragraph_boundaries_are_preferred_over_lines() -> None:
    first = "\n".join(["a" * 50] * 20)  # 1019 chars of lines
    second = "\n".join(["b" * 50] * 20)
    parts = split_message(first + "\n\n" + second + "\n" + "c" * 50, limit=1500)
    assert parts[0] == first
    assert parts[1].startswith("b")


def test_lines_then_words_then_hard_cuts() -> None:
    lines = "\n".join(f"line {n:03d} " + "w" * 40 for n in range(60))
    parts = split_message(lines, limit=500)
    assert all(len(p) <= 500 for p in parts)
    assert all(p.startswith("line ") and p.endswith("w") for p in parts)

    words = " ".join(["word"] * 300)
    assert all(p.startswith("word") and p.endswith("word") for p in split_message(words, 200))

    blob = "x" * 450
    assert split_message(blob, limit=200) == ["x" * 200, "x" * 200, "x" * 50]


def test_a_code_block_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"print({n})" for n in range(400))
    text = "Intro.\n\n```python\n" + code + "\n```\nOutro."
    parts = split_message(text)
    assert len(parts) >= 2
    assert all(len(p) <= MESSAGE_LIMIT for p in parts)
    assert all(fence_lines(p) % 2 == 0 for p in parts)
    assert parts[0].endswith("\n```")
    assert parts[1].startswith("```python\nprint(")
    assert parts[-1].endswith("Outro.")
    assert visible("\n".join(parts)) == visible(text)


lines = st.one_of(
    st.text(alphabet="abc xyz.,", min_size=0, max_size=120),
    st.sampled_from(["```", "```py", "```javascript", ""]),
    st.text(alphabet="q", min_size=150, max_size=400),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, min_size=1, max_size=80), st.integers(min_value=120, max_value=600))
def test_any_text_splits_into_small_balanced_parts_losing_nothing(
    chunks: list[str], limit: int
) -> None:
    text = "\n".join(chunks)
    if not text.strip():
        return
    parts = split_message(text, limit=limit)
    assert all(len(p) <= limit for p in parts)
    assert all(p.strip() for p in parts)
    if len(parts) > 1:  # every part closes the fences it opens, even one the reply left open
        assert all(fence_lines(p) % 2 == 0 for p in parts)
        assert all(visible(p) for p in parts)
    assert visible("\n".join(parts)) == visible(text)


def test_a_limit_too_small_for_the_fences_is_refused() -> None:
    with pytest.raises(ValueError):
        split_message("```" + "x" * 90 + "\n" + "y" * 300, limit=100)


def test_nonces_are_short_stable_and_distinct_per_reply_and_part() -> None:
    nonce = nonce_for("r7", "discord/1/2/", 0, "hello")
    assert len(nonce) <= DISCORD_NONCE_LIMIT
    assert nonce == nonce_for("r7", "discord/1/2/", 0, "hello")
    others = {
        nonce_for("r7", "discord/1/2/", 1, "hello"),
        nonce_for("r8", "discord/1/2/", 0, "hello"),
        nonce_for("r7", "discord/1/3/", 0, "hello"),
        nonce_for("r7", "discord/1/2/", 0, "hello!"),
    }
    assert nonce not in others and len(others) == 4


def test_allowed_mentions_never_include_everyone_roles_or_users() -> None:
    assert allowed_mentions(True).to_dict() == {"parse": [], "replied_user": True}
    assert allowed_mentions(False).to_dict() == {"parse": []}


@pytest.mark.parametrize(
    ("markdown", "discord_text"),
    [
        ("**bold** *it* ~~gone~~ `code`", "**bold** *it* ~~gone~~ `code`"),
        ("[hey](<@123>)", "hey (@123)"),
        ("[role](<@&456>) [chan](<#789>)", "role (@&456) chan (#789)"),
        ("[hey](@U123)", "hey (@U123)"),
        ("[x](javascript:alert(1))", "\\[x\\](javascript:alert(1))"),
        ("[x](data:text/html,hi)", "\\[x\\](data:text/html,hi)"),
        ("[[1]](https://x.io)", "[\\[1\\]](<https://x.io>)"),
        ("hi <@123> <@&4> <#5> <t:1:R> <:e:6>", "hi \\<@123> \\<@&4> \\<#5> \\<t:1:R> \\<:e:6>"),
        ("@everyone @here", "@\u200beveryone @\u200bhere"),
        ("[docs](https://x.io/a)", "[docs](<https://x.io/a>)"),
        (
            "[Python](https://en.wikipedia.org/wiki/Python_(programming_language))",
            "[Python](<https://en.wikipedia.org/wiki/Python_(programming_language)>)",
        ),
        (
            "see https://en.wikipedia.org/wiki/Python_(programming_language).",
            "see <https://en.wikipedia.org/wiki/Python_(programming_language)>.",
        ),
        ("see https://example.org", "see https://example.org"),
        ("snake_case_name and 2 * 3", "snake_case_name and 2 \\* 3"),
        ("a \\*literal\\* star", "a \\*literal\\* star"),
        ("\\# not a heading\n\\- not a list", "\\# not a heading\n\\- not a list"),
        ("so about | the deploy || spoiler", "so about | the deploy \\|\\| spoiler"),
        ("```python\nprint('<@1>')\n```", "```python\nprint('<@1>')\n```"),
        ("# Title\n#### Small", "# Title\n**Small**"),
        ("> alice: hey\n> alice: more", "> alice: hey\n> alice: more"),
    ],
)  # fmt: skip
def test_to_discord_keeps_markdown_and_defuses_mentions_and_link_targets(
    markdown: str, discord_text: str
) -> None:
    assert to_discord(markdown) == discord_text


def test_to_discord_renders_tables_as_code_blocks() -> None:
    assert to_discord("| a | b |\n|---|---|\n| 1 | <@2> |") == (
        "```\na | b\n--+-----\n1 | <@2>\n```"
    )


_PIECES = ["<", ">", "@", "123", "&", "#", "!", "|", "[", "]", "(", ")", "http://a.io",
           "https://x.io/(y)", "mailto:a@b.io", "javascript:x", " ", "\n", "*", "_", "t:", ":e:",
           "everyone", "here", "\\"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_no_mention_syntax_or_foreign_link_target_survives(pieces: list[str]) -> None:
    out = to_discord("".join(pieces))
    for at in (i for i, ch in enumerate(out) if ch == "<"):
        escaped = (len(out[:at]) - len(out[:at].rstrip("\\"))) % 2 == 1  # an odd run of \\
        assert escaped or out.startswith(("<http://", "<https://"), at), out
    for match in re.finditer(r"(?<!\\)\]\(", out):
        targets = ("<http://", "<https://", "http://", "https://", "mailto:")
        assert out.startswith(targets, match.end()), out
    assert "@everyone" not in out and "@here" not in out
