"""Claude's Markdown → Slack mrkdwn, split below Slack's message limit, and never a ping.

Slack mrkdwn is not Markdown: bold is `*x*`, italics `_x_`, strikethrough `~x~`, links
`<url|label>`, no headings or tables, and `&`, `<`, `>` must be escaped everywhere, code included.
The Markdown is parsed by adapters/markdown.py, which also holds the rules against pings: escaping
every `<` of the model's text is what makes `<!channel>`, `<!here>`, `<@U123>` and
`<!subteam^…>` inert, and only http(s) and mailto targets become `<url|label>` links.
"""

from __future__ import annotations

from typing import Any

from markdown_it.tree import SyntaxTreeNode

from adapters.markdown import ZERO_WIDTH_SPACE, Renderer, defuse_broadcasts

MAX_PART_CHARS = 3500
"""Slack truncates `text` at 40,000 characters and advises staying under 4,000."""

SECTION_CHARS = 3000  # Slack's limit on a section block's text

FENCE = "```"


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackRenderer(Renderer):
    def text(self, text: str) -> str:
        return defuse_broadcasts(escape(text)).replace(FENCE, "``" + ZERO_WIDTH_SPACE + "`")

    def code_span(self, code: str) -> str:
        code = defuse_broadcasts(escape(code.replace("`", "'")))
        return f"`{code}`" if code.strip() else code

    def code_block(self, code: str, language: str) -> list[str]:
        # A language tag would show as the first line of code in Slack, so it is dropped.
        return [FENCE, *self.text(code).split("\n"), FENCE]

    def emphasis(self, kind: str, inner: str) -> str:
        mark = {"strong": "*", "em": "_", "s": "~"}[kind]
        return f"{mark}{inner}{mark}"

    def link(self, href: str, label: str, raw_label: str) -> str:
        url = escape(href).replace("|", "%7C")
        label = " ".join(label.replace("|", "/").split())
        return f"<{url}|{label}>" if label and raw_label.strip() != href else f"<{url}>"

    def heading(self, level: int, inline: SyntaxTreeNode) -> str:
        title = self.inline(inline, formatting=False).strip()
        return f"*{title}*" if title else ""


_RENDERER = SlackRenderer()


def to_mrkdwn(markdown: str) -> str:
    """Convert the model's Markdown to Slack mrkdwn (see the module docstring)."""
    return _RENDERER.render(markdown)


def split_mrkdwn(text: str, limit: int = MAX_PART_CHARS) -> list[str]:
    """Split into parts of at most `limit` characters, each with balanced code fences.

    Whole code blocks stay together when they fit in one part; a longer one is cut between lines,
    closed at the end of one part and reopened at the start of the next.
    """
    if limit < 50:
        raise ValueError("limit too small to split into readable parts")
    parts: list[str] = []
    current = ""
    for unit in _units(text):
        for piece in _fit(unit, limit):
            joined = f"{current}\n{piece}" if current else piece
            if len(joined) <= limit:
                current = joined
            else:
                parts.append(current)
                current = piece
    if current:
        parts.append(current)
    return [part.strip("\n") for part in parts if part.strip()]


def mrkdwn_sections(text: str) -> list[dict[str, Any]]:
    """Blocks of mrkdwn `text` cut to Slack's section size (a message with buttons is blocks)."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}, "expand": True}
        for part in split_mrkdwn(text, SECTION_CHARS)
        if part.strip()
    ]


def _units(text: str) -> list[str]:
    """Prose lines one by one; a fenced code block (as `to_mrkdwn` writes it) as one unit."""
    units: list[str] = []
    block: list[str] | None = None
    for line in text.split("\n"):
        if block is None and line.strip() == FENCE:
            block = [FENCE]
        elif block is not None:
            block.append(line)
            if line.strip() == FENCE:
                units.append("\n".join(block))
                block = None
        else:
            units.append(line)
    if block is not None:
        block.append(FENCE)
        units.append("\n".join(block))
    return units


def _fit(unit: str, limit: int) -> list[str]:
    """Pieces of one unit, each at most `limit` characters."""
    if len(unit) <= limit:
        return [unit]
    if not unit.startswith(FENCE):
        return _cut_line(unit, limit)
    body = unit[len(FENCE) :].lstrip("\n")
    body = body[: -len(FENCE)].rstrip("\n") if body.endswith(FENCE) else body
    room = limit - 2 * (len(FENCE) + 1)
    pieces: list[str] = []
    chunk = ""
    for line in body.split("\n"):
        for segment in _cut_line(line, room) if len(line) > room else [line]:
            if chunk and len(chunk) + 1 + len(segment) > room:
                pieces.append(chunk)
                chunk = segment
            else:
                chunk = f"{chunk}\n{segment}" if chunk else segment
    pieces.append(chunk)
    return [f"{FENCE}\n{piece}\n{FENCE}" for piece in pieces]


def _cut_line(line: str, limit: int) -> list[str]:
    """Cut a long line at spaces where possible, never inside an entity or `<link>`."""
    pieces: list[str] = []
    while len(line) > limit:
        cut = line.rfind(" ", 0, limit + 1)
        if cut <= limit // 2:
            cut = limit
        head = line[:cut]
        opened = head.rfind("<")
        if opened > head.rfind(">") and opened > 0:
            cut = opened
        amp = line.rfind("&", 0, cut)
        if amp > line.rfind(";", 0, cut) and cut - amp < 8 and amp > 0:
            cut = amp
        pieces.append(line[:cut].rstrip())
        line = line[cut:].lstrip(" ")
    pieces.append(line)
    return pieces
