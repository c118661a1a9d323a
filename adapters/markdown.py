"""The model's Markdown → a chat platform's markup: one real parser, one renderer per platform.

The model's output is untrusted (a prompt injection can make it write anything), so it is parsed
with markdown-it-py (CommonMark, plus tables, strikethrough and bare-URL detection; raw HTML off)
and rendered from the syntax tree, never patched with regular expressions. Every renderer keeps
the rules of docs/markdown.md: only `http(s)` and `mailto` targets link (any other is shown as
text after the label), every `<` of the model's text is escaped and bare broadcasts get a
zero-width space (no mention, broadcast or channel syntax survives), link targets are taken whole
from the parser, tables become aligned code blocks, and blocks separated in the source stay so.

A subclass supplies the platform's spelling of each construct (`SlackRenderer` in
adapters/slack/mrkdwn.py, `DiscordRenderer` in adapters/discord/render.py).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import NamedTuple

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

ZERO_WIDTH_SPACE = "\u200b"
RULE = "──────────"
TRUNCATED_NOTE = "… (reply truncated: too long to post in full)"
LINK_SCHEMES = ("http://", "https://", "mailto:")

_BROADCAST = re.compile(r"@(channel|here|everyone)", re.IGNORECASE)
_TASK = re.compile(r"\[([ xX])\] ")
_ALIGN = re.compile(r"text-align:(left|center|right)")


class Line(NamedTuple):
    text: str
    verbatim: bool = False  # a code block line: never indented, never re-escaped


def parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": True})
    md.enable(["table", "strikethrough", "linkify"])
    assert md.linkify is not None, "markdown-it-py[linkify] provides linkify-it-py"
    md.linkify.set({"fuzzy_link": False})  # `example.com` stays text; URLs with a scheme link
    return md


def link_allowed(href: str) -> bool:
    lowered = href.strip().lower()
    return lowered.startswith(LINK_SCHEMES) and len(lowered) > len("mailto:")


def defuse_broadcasts(text: str) -> str:
    return _BROADCAST.sub(lambda m: "@" + ZERO_WIDTH_SPACE + m.group(1), text)


class Renderer(ABC):
    """Walks the syntax tree; the platform methods below say how each construct is written."""

    _md = parser()

    def render(self, markdown: str) -> str:
        source = markdown.replace("\r\n", "\n").replace("\x00", "")
        self._source = source.split("\n")
        root = SyntaxTreeNode(self._md.parse(source))
        return "\n".join(line.text for line in self._blocks(root.children)).strip("\n")

    # the platform's spelling -------------------------------------------------------------------
    @abstractmethod
    def text(self, text: str) -> str:
        """Literal text, escaped so that the platform shows it as written."""

    @abstractmethod
    def code_span(self, code: str) -> str: ...

    @abstractmethod
    def code_block(self, code: str, language: str) -> list[str]: ...

    @abstractmethod
    def emphasis(self, kind: str, inner: str) -> str:
        """`kind`: strong, em or s (strikethrough)."""

    @abstractmethod
    def link(self, href: str, label: str, raw_label: str) -> str:
        """A link to an allowed target (http, https or mailto); `label` is already rendered."""

    formatted_link_labels = False
    """Whether link labels keep bold, italics and code (else they are plain text)."""

    @abstractmethod
    def heading(self, level: int, inline: SyntaxTreeNode) -> str: ...

    bullet = "• "

    def paragraph_line(self, line: str) -> str:
        """A hook for escaping what would start a block at the beginning of a line."""
        return line

    # blocks ----------------------------------------------------------------------------------
    def _blocks(self, nodes: Sequence[SyntaxTreeNode]) -> list[Line]:
        out: list[Line] = []
        for node in nodes:
            lines = self._block(node)
            if not lines:
                continue
            if out and self._blank_before(node):
                out.append(Line(""))
            out.extend(lines)
        return out

    def _blank_before(self, node: SyntaxTreeNode) -> bool:
        """Whether the source has a blank line (inside quotes: a bare `>`) just before `node`."""
        start = node.map[0] if node.map else 0
        if start == 0 or start > len(self._source):
            return False
        return not self._source[start - 1].replace(">", "").strip()

    def _block(self, node: SyntaxTreeNode) -> list[Line]:
        kind = node.type
        if kind == "paragraph":
            text = self.inline(node.children[0]) if node.children else ""
            return [Line(self.paragraph_line(line)) for line in text.split("\n")]
        if kind == "heading":
            return [Line(self.heading(int(node.tag[1:]), node.children[0]))]
        if kind == "hr":
            return [Line(RULE)]
        if kind == "blockquote":
            inner = self._blocks(node.children) or [Line("")]
            return [Line("> " + line.text if line.text else ">") for line in inner]
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node)
        if kind in ("fence", "code_block"):
            language = node.info.strip().split(" ")[0] if kind == "fence" else ""
            code = node.content.removesuffix("\n")
            return [Line(line, verbatim=True) for line in self.code_block(code, language)]
        if kind == "table":
            return [Line(line, verbatim=True) for line in self.code_block(self._table(node), "")]
        return [Line(self.text(line)) for line in node.content.split("\n") if node.content]

    def _list(self, node: SyntaxTreeNode) -> list[Line]:
        out: list[Line] = []
        start = int(node.attrs.get("start", 1))
        for index, item in enumerate(node.children):
            number = item.info or str(start + index)
            marker = self.bullet if node.type == "bullet_list" else f"{number}. "
            lines = self._blocks(item.children) or [Line("")]
            if out and self._blank_before(item):
                out.append(Line(""))
            task = _TASK.match(lines[0].text) if not lines[0].verbatim else None
            if task:
                box = "☐ " if task.group(1) == " " else "☑ "
                lines[0] = Line(box + lines[0].text[task.end() :])
            if lines[0].verbatim:
                out.append(Line(marker.rstrip()))
            else:
                out.append(Line(marker + lines[0].text))
                lines = lines[1:]
            pad = " " * len(marker)
            for line in lines:
                out.append(Line(pad + line.text) if line.text and not line.verbatim else line)
        return out

    def _table(self, node: SyntaxTreeNode) -> str:
        rows: list[list[tuple[str, str]]] = []
        for section in node.children:
            for tr in section.children:
                cells = []
                for cell in tr.children:
                    style = _ALIGN.search(str(cell.attrs.get("style", "")))
                    text = plain_text(cell.children[0]) if cell.children else ""
                    cells.append((" ".join(text.split()), style.group(1) if style else "left"))
                rows.append(cells)
        widths = [max(len(text) for text, _ in column) for column in zip(*rows, strict=True)]
        lines = []
        for number, row in enumerate(rows):
            padded = []
            for i, (text, align) in enumerate(row):
                fill = {"left": str.ljust, "right": str.rjust, "center": str.center}[align]
                padded.append(fill(text, widths[i]))
            lines.append(" | ".join(padded).rstrip())
            if number == 0:
                lines.append("-+-".join("-" * width for width in widths))
        return "\n".join(lines)

    # inline ----------------------------------------------------------------------------------
    def inline(self, node: SyntaxTreeNode, formatting: bool = True) -> str:
        return "".join(self._span(child, formatting) for child in node.children)

    def _span(self, node: SyntaxTreeNode, formatting: bool) -> str:
        kind = node.type
        if kind == "text":
            return self.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return self.code_span(node.content)
        if kind in ("strong", "em", "s"):
            inner = self.inline(node, formatting)
            if not formatting or not inner.strip():
                return inner
            solid = [child for child in node.children if child.type != "text" or child.content]
            if kind == "em" and len(solid) == 1 and solid[0].type == "strong":
                return self.emphasis("strong", self.emphasis("em", self.inline(solid[0])))
            return self.emphasis(kind, inner)
        if kind == "link":
            href = str(node.attrs.get("href", ""))
            raw = plain_text(node)
            if link_allowed(href):
                label = self.inline(node, formatting and self.formatted_link_labels)
                return self.link(href, label, raw)
            return self._shown_as_text(self.inline(node, formatting), raw, href)
        if kind == "image":
            src = str(node.attrs.get("src", ""))
            alt = plain_text(node)
            if link_allowed(src):
                return self.link(src, self.text(alt), alt)
            return self._shown_as_text(self.text(alt), alt, src)
        return self.text(node.content)

    def _shown_as_text(self, label: str, raw_label: str, target: str) -> str:
        """A link whose target may not be a link: its label, then the target as plain text."""
        if not target or target == raw_label.strip():
            return label or self.text(target)
        return f"{label} ({self.text(target)})" if label.strip() else self.text(target)


def plain_text(node: SyntaxTreeNode) -> str:
    """The text a reader sees in an inline node, without formatting (links keep their label)."""
    if node.type in ("text", "code_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(plain_text(child) for child in node.children)


def cap_parts(
    parts: list[str], max_parts: int, limit: int, split: Callable[[str, int], list[str]]
) -> list[str]:
    """At most `max_parts` parts; when some are dropped, the last one kept ends with a note.

    The last part is re-split to make room for the note, with the platform's own splitter, so its
    code blocks stay balanced. Deterministic: a re-delivery computes the same parts.
    """
    if len(parts) <= max_parts:
        return parts
    kept = parts[:max_parts]
    room = limit - len(TRUNCATED_NOTE) - 1
    last = kept[-1] if len(kept[-1]) <= room else split(kept[-1], room)[0]
    kept[-1] = f"{last}\n{TRUNCATED_NOTE}"
    return kept


_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_HALF_LINK = re.compile(r"!?\[[^\]\n]*(\]\([^)\n]*)?$")
_CODE_SPAN = re.compile(r"`[^`]*`")
_HALF_FENCE = re.compile(r"\n {0,3}(`{1,2}|~{1,2})$")


def settle_partial(markdown: str) -> str:
    """Text the model is still writing, made whole enough to render as it will end up: an open
    code fence, code span, `**` or `~~` is closed, and a link begun at the very end is left out
    until it is finished (a draft never shows `[label](http://exa`)."""
    opener: str | None = None
    for match in _FENCE_LINE.finditer(markdown):
        fence = match.group(1)
        if opener is None:
            opener = fence
        elif fence[0] == opener[0] and len(fence) >= len(opener):
            opener = None
    if opener is not None:  # a closing fence begun on the last line is left out
        return _HALF_FENCE.sub("", markdown).rstrip("\n") + "\n" + opener
    text = _HALF_LINK.sub("", markdown).rstrip()
    paragraph = text.rsplit("\n\n", 1)[-1]
    if paragraph.count("`") % 2:
        return text + "`"
    outside_code = _CODE_SPAN.sub("", paragraph)
    for marker in ("**", "~~"):
        if outside_code.count(marker) % 2:
            text = text.rstrip(marker[0]) + marker if not text.endswith(marker) else text[:-2]
    return text.rstrip()
