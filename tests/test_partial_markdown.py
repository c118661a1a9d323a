"""Partial text (a draft while the model writes) renders whole on both platforms: an open code
block, code span, `**` or `~~` is closed, and a link shows only once complete."""

from __future__ import annotations

import pytest

from adapters.discord.render import split_message, to_discord
from adapters.markdown import settle_partial
from adapters.slack.mrkdwn import to_mrkdwn


@pytest.mark.parametrize(
    ("partial", "settled"),
    [
        ("Run:\n```py\nprint(1", "Run:\n```py\nprint(1\n```"),
        ("Run:\n```py\nprint(1)\n``", "Run:\n```py\nprint(1)\n```"),
        ("a\n```\nx\n```\nthen", "a\n```\nx\n```\nthen"),  # closed fences stay as they are
        ("see [the docs](https://exa", "see"),
        ("see [the d", "see"),
        ("see [the docs](https://example.com) now", "see [the docs](https://example.com) now"),
        ("this is **bol", "this is **bol**"),
        ("use `git st", "use `git st`"),
        ("so ~~wr", "so ~~wr~~"),
        ("done **bold** and `code`", "done **bold** and `code`"),
    ],
)
def test_partial_markdown_is_settled(partial: str, settled: str) -> None:
    assert settle_partial(partial) == settled


def test_a_half_written_code_block_renders_as_a_code_block_on_both_platforms() -> None:
    partial = "Here is the fix:\n```python\ndef f(x):\n    return x *"
    slack = to_mrkdwn(settle_partial(partial))
    discord = to_discord(settle_partial(partial))
    for rendered in (slack, discord):
        assert rendered.count("```") == 2 and rendered.rstrip().endswith("```")
        assert "return x *" in rendered  # code is shown verbatim, not escaped
    assert split_message(discord) == [discord]


def test_a_half_written_link_never_shows_its_markup() -> None:
    for partial in ("read [this](https://example.com/a_b", "read [thi"):
        for rendered in (to_mrkdwn(settle_partial(partial)), to_discord(settle_partial(partial))):
            assert "[" not in rendered and "](" not in rendered and "<http" not in rendered
