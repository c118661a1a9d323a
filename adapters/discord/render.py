"""Turning one neutral reply into Discord posts: parts, nonces, allowed mentions.

Discord refuses messages over 2000 characters: cuts fall on paragraph, then line, then word
boundaries, and a cut inside a code fence closes the fence and reopens it (with its language) in
the next part, so every part renders. `to_discord` renders the model's Markdown for Discord (the
rules: docs/markdown.md; the parser: adapters/markdown.py). Discord renders Markdown itself, so
the output stays Markdown, re-escaped to show as written; a masked link's target goes in angle
brackets (no embed preview), so a list of sources does not turn into a wall of previews.
"""

from __future__ import annotations

import hashlib
import re

import discord
from markdown_it.tree import SyntaxTreeNode

from adapters.markdown import ZERO_WIDTH_SPACE, Renderer, defuse_broadcasts

MESSAGE_LIMIT = 2000
FENCE = "```"
_LONGEST_FENCE_OPENER = 100
_SEPARATORS = ("\n\n", "\n", " ")

_ALWAYS_ESCAPED = re.compile(r"([\\*~`<\[\]])")
_UNDERSCORE = re.compile(r"(?<!\w)_|_(?!\w)")  # intraword `_` (snake_case) is not emphasis
_BLOCK_START = re.compile(r"^(\s*(?:\d+)?)(#|>|(?<!\d)[-+]|(?<=\d)[.)])(?=\s)")
_BARE_URL_END = re.compile(r"[A-Za-z0-9/]$")
_BALANCED_PARENS = re.compile(r"(?:\([^()\s]*\)|[^()\s])*")


class DiscordRenderer(Renderer):
    bullet = "- "
    formatted_link_labels = True

    def text(self, text: str) -> str:
        text = _ALWAYS_ESCAPED.sub(r"\\\1", text)
        text = _UNDERSCORE.sub(r"\\_", text).replace("||", "\\|\\|")
        return defuse_broadcasts(text)

    def paragraph_line(self, line: str) -> str:
        """Text that Discord would read as a heading, quote or list item at a line start."""
        return _BLOCK_START.sub(lambda m: m.group(1) + "\\" + m.group(2), line, count=1)

    def code_span(self, code: str) -> str:
        if not code.strip():
            return self.text(code)
        return f"`` {code} ``" if "`" in code else f"`{code}`"

    def code_block(self, code: str, language: str) -> list[str]:
        body = code.replace(FENCE, "``" + ZERO_WIDTH_SPACE + "`")
        language = language if re.fullmatch(r"[\w+#.-]{1,30}", language) else ""
        return [FENCE + language, *body.split("\n"), FENCE]

    def emphasis(self, kind: str, inner: str) -> str:
        mark = {"strong": "**", "em": "*", "s": "~~"}[kind]
        return f"{mark}{inner}{mark}"

    def link(self, href: str, label: str, raw_label: str) -> str:
        if href.lower().startswith("mailto:"):  # Discord links http(s) only: the rest is text
            shown = raw_label.strip()
            return self.text(href if not shown or shown == href else f"{shown} ({href})")
        href = defuse_broadcasts(href)  # Discord looks for @everyone anywhere in a message
        if not raw_label.strip() or raw_label.strip() == href:
            return href if _BARE_URL_END.search(href) else f"<{href}>"
        if not _BALANCED_PARENS.fullmatch(href):
            href = href.replace("(", "%28").replace(")", "%29")
        return f"[{label}](<{href}>)"  # the angle brackets suppress the link's embed

    def heading(self, level: int, inline: SyntaxTreeNode) -> str:
        title = self.inline(inline).strip()
        if not title:
            return ""
        return f"{'#' * level} {title}" if level <= 3 else f"**{title}**"


_RENDERER = DiscordRenderer()


def to_discord(markdown: str) -> str:
    """The model's Markdown as Discord Markdown (see the module docstring)."""
    return _RENDERER.render(markdown)


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split `text` into parts of at most `limit` characters with balanced code fences."""
    if len(text) <= limit:
        return [text]
    openers = [line.strip() for line in text.splitlines() if _is_fence(line)]
    longest_opener = min(max((len(o) for o in openers), default=0), _LONGEST_FENCE_OPENER)
    # Room for reopening a fence ("```lang\n") at the start and closing it ("\n```") at the end.
    budget = limit - (longest_opener + 1 + len(FENCE) + 1 if openers else 0)
    if budget < limit // 2:
        raise ValueError(f"split_message: limit {limit} is too small for this text")
    parts: list[str] = []
    open_fence: str | None = None
    for piece in _pieces(text, budget):
        body = f"{open_fence}\n{piece}" if open_fence else piece
        open_fence = _fence_state_after(piece, open_fence)
        if open_fence:
            body += "\n" + FENCE
        parts.append(body)
    return parts


def _pieces(text: str, budget: int) -> list[str]:
    """Cut raw text into chunks of at most `budget` characters at the nicest boundary."""
    pieces: list[str] = []
    rest = text
    while len(rest) > budget:
        cut, skip = _best_cut(rest, budget)
        if _only_fences(rest[:cut]):
            cut, skip = budget, 0  # a part holding just "```py" says nothing: cut the long line
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut + skip :].lstrip("\n")
    if not _only_fences(rest) or not pieces:
        pieces.append(rest)  # a trailing lone fence line adds nothing: every part closes its own
    return pieces


def _best_cut(text: str, budget: int) -> tuple[int, int]:
    """Where to cut and how many separator characters to drop there."""
    fallback: tuple[int, int] | None = None
    for separator in _SEPARATORS:
        at = text.rfind(separator, 0, budget + 1)
        if at >= budget // 2:
            return at, len(separator)
        if at > 0 and fallback is None:
            fallback = (at, len(separator))
    return fallback or (budget, 0)


def _only_fences(text: str) -> bool:
    return all(_is_fence(line) or not line.strip() for line in text.splitlines())


def _is_fence(line: str) -> bool:
    return line.lstrip().startswith(FENCE)


def _fence_state_after(piece: str, open_fence: str | None) -> str | None:
    """The fence opener still open after `piece` (None when every fence is closed)."""
    for line in piece.splitlines():
        if _is_fence(line):
            open_fence = None if open_fence else line.strip()[:_LONGEST_FENCE_OPENER]
    return open_fence


def nonce_for(reply_id: str, conversation_id: str, part: int, text: str) -> str:
    """A stable nonce (≤ 25 chars) for one part of one reply.

    The text is part of the hash so that a reply id reused by a fresh database within Discord's
    nonce window cannot be mistaken for an earlier, different post.
    """
    seed = f"{conversation_id}\x00{reply_id}\x00{part}\x00{text}".encode()
    digest = hashlib.blake2b(seed, digest_size=11).hexdigest()
    return f"bb{digest}"  # 24 characters


def allowed_mentions(mention_author: bool) -> discord.AllowedMentions:
    """Model output never pings @everyone, @here, roles or arbitrary users."""
    return discord.AllowedMentions(
        everyone=False, roles=False, users=False, replied_user=mention_author
    )
