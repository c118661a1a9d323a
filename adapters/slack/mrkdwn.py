"""Claude's Markdown → Slack mrkdwn, split below Slack's message limit, and never a ping.

Slack mrkdwn is not Markdown: bold is `*x*`, italics `_x_`, links `<url|label>`, no headings, and
`&`, `<`, `>` must be escaped. Escaping every `<` of model output is also what makes it unable to
ping: `<!channel>`, `<!here>`, `<!everyone>` and `<!subteam^…>` only work as raw control sequences.
Bare `@channel`/`@here`/`@everyone` get a zero-width space after the `@` as well.
"""

from __future__ import annotations

import re

MAX_PART_CHARS = 3500
"""Slack truncates `text` at 40,000 characters and advises staying under 4,000."""

FENCE = "```"
ZERO_WIDTH_SPACE = "\u200b"

_FENCE_LINE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?:\[( |x|X)\]\s+)?(.*)$")
_ORDERED = re.compile(r"^(\s*)(\d+)[.)]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BOLD_ITALIC = re.compile(r"(\*\*\*|___)(?=\S)(.+?)(?<=\S)\1")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_PLACEHOLDER = re.compile("\x00(\\d+)\x00")
_SPECIAL_MENTION = re.compile(r"<!(?:channel|here|everyone|subteam\^)[^>]*>", re.IGNORECASE)
_BARE_MENTION = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)
_BOLD_MARK = "\x01"


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def neutralise_mentions(text: str) -> str:
    """Make `<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^…>` and bare `@here` inert."""
    text = _SPECIAL_MENTION.sub(lambda m: escape(m.group(0)), text)
    return _BARE_MENTION.sub(lambda m: "@" + ZERO_WIDTH_SPACE + m.group(1), text)


def to_mrkdwn(markdown: str) -> str:
    """Convert Markdown (bold, italics, links, headings, lists, quotes, code) to Slack mrkdwn."""
    out: list[str] = []
    in_code = False
    for line in markdown.replace("\r\n", "\n").replace("\x00", "").replace("\x01", "").split("\n"):
        if _FENCE_LINE.match(line):
            out.append(FENCE)  # a language tag would show as the first line of code in Slack
            in_code = not in_code
        elif in_code:
            out.append(escape(line))
        else:
            out.append(_block(line))
    if in_code:
        out.append(FENCE)
    return neutralise_mentions("\n".join(out).strip("\n"))


def _block(line: str) -> str:
    if m := _HEADING.match(line):
        title = _inline(m.group(1)).replace("*", "")
        return f"*{title}*" if title else ""
    if _RULE.match(line):
        return "──────────"
    if m := _QUOTE.match(line):
        return "> " + _inline(m.group(1))
    if m := _BULLET.match(line):
        box = {" ": "☐ ", "x": "☑ ", "X": "☑ "}.get(m.group(2) or "", "")
        return f"{m.group(1)}• {box}{_inline(m.group(3))}"
    if m := _ORDERED.match(line):
        return f"{m.group(1)}{m.group(2)}. {_inline(m.group(3))}"
    return _inline(line)


def _inline(text: str) -> str:
    kept: list[str] = []

    def keep(rendered: str) -> str:
        kept.append(rendered)
        return f"\x00{len(kept) - 1}\x00"

    text = _CODE_SPAN.sub(lambda m: keep("`" + escape(m.group(2).strip()) + "`"), text)
    text = _LINK.sub(lambda m: keep(_link(m.group(2), m.group(1))), text)
    text = _AUTOLINK.sub(lambda m: keep(_link(m.group(1), "")), text)
    text = escape(text)
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(2)}_{_BOLD_MARK}", text)
    text = _BOLD.sub(lambda m: _BOLD_MARK + m.group(2) + _BOLD_MARK, text)
    text = _ITALIC_STAR.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = text.replace(_BOLD_MARK, "*")
    return _PLACEHOLDER.sub(lambda m: kept[int(m.group(1))], text)


def _link(url: str, label: str) -> str:
    url = escape(url).replace("|", "%7C")
    label = escape(label.replace("|", "/")).strip()
    return f"<{url}|{label}>" if label and label != url else f"<{url}>"


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
