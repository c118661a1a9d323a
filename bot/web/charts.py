"""Bar charts as SVG drawn on the server: no script, no library, nothing to build; labels are
escaped like every other text on the page (a channel's name comes from a platform)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

WIDTH = 640
BAR = 18  # a horizontal bar's height
GAP = 6
LABEL_WIDTH = 220
VALUE_WIDTH = 90
COLUMN_HEIGHT = 160  # the tallest column of a column chart


def _text(x: float, y: float, text: str, anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="12">'
            f"{escape(text)}</text>")  # fmt: skip


def bar_chart(
    title: str, rows: Sequence[tuple[str, float]], shown: Callable[[float], str] = "{:g}".format
) -> str:
    """One horizontal bar per row (label, value), scaled to the largest value."""
    if not rows:
        return f'<p class="empty">{escape(title)}: nothing yet</p>'
    top = max((value for _, value in rows), default=0.0) or 1.0
    span = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    height = len(rows) * (BAR + GAP) + GAP
    parts = []
    for i, (label, value) in enumerate(rows):
        y = GAP + i * (BAR + GAP)
        width = max(0.0, value / top * span)
        short = label if len(label) <= 32 else label[:31] + "…"
        parts += [
            _text(LABEL_WIDTH - 6, y + BAR - 5, short, "end"),
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{width:.1f}" height="{BAR}" fill="#4a7bd0">'
            f"<title>{escape(label)}: {escape(shown(value))}</title></rect>",
            _text(LABEL_WIDTH + width + 6, y + BAR - 5, shown(value)),
        ]
    return _svg(title, WIDTH, height, parts)


def split_bar_chart(
    title: str, rows: Sequence[tuple[str, int, int]], names: tuple[str, str] = ("up", "down")
) -> str:
    """One bar per row (label, first, second), the two counts side by side in one bar (green,
    then red), scaled to the largest total: votes up and down, say."""
    if not rows:
        return f'<p class="empty">{escape(title)}: nothing yet</p>'
    top = max(first + second for _, first, second in rows) or 1
    span = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    height = len(rows) * (BAR + GAP) + GAP
    parts = []
    for i, (label, first, second) in enumerate(rows):
        y = GAP + i * (BAR + GAP)
        x = float(LABEL_WIDTH)
        short = label if len(label) <= 32 else label[:31] + "…"
        parts.append(_text(LABEL_WIDTH - 6, y + BAR - 5, short, "end"))
        for count, name, colour in ((first, names[0], "#3a9a5b"), (second, names[1], "#c8483f")):
            width = count / top * span
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BAR}" fill="{colour}">'
                f"<title>{escape(label)}: {count:,} {escape(name)}</title></rect>"
            )
            x += width
        share = round(100 * first / (first + second)) if first + second else 0
        parts.append(_text(x + 6, y + BAR - 5, f"{first:,} / {second:,} ({share}%)"))
    return _svg(title, WIDTH, height, parts)


def column_chart(
    title: str, rows: Sequence[tuple[str, float]], shown: Callable[[float], str] = "{:g}".format
) -> str:
    """One column per row (a day, a bucket), left to right, scaled to the largest value."""
    if not rows:
        return f'<p class="empty">{escape(title)}: nothing yet</p>'
    top = max((value for _, value in rows), default=0.0) or 1.0
    step = min(80.0, (WIDTH - 20) / len(rows))
    base = COLUMN_HEIGHT + 20
    parts = [f'<line x1="10" y1="{base}" x2="{WIDTH - 10}" y2="{base}" stroke="#999"/>']
    for i, (label, value) in enumerate(rows):
        x = 10 + i * step
        height = value / top * COLUMN_HEIGHT
        parts += [
            f'<rect x="{x + 2:.1f}" y="{base - height:.1f}" width="{step - 4:.1f}" '
            f'height="{height:.1f}" fill="#4a7bd0"><title>{escape(label)}: '
            f"{escape(shown(value))}</title></rect>",
            _text(x + step / 2, base - height - 4, shown(value), "middle"),
            _text(x + step / 2, base + 14, label[-5:] if len(rows) > 8 else label, "middle"),
        ]
    return _svg(title, WIDTH, base + 22, parts)


def _svg(title: str, width: int, height: int, parts: list[str]) -> str:
    label = escape(title)
    return (
        f'<figure><figcaption>{label}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{label}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg></figure>'
    )
