"""What operators' commands (`burstbot status`, `explain`, `usage`) show: `printable` text, tables.

Everything stored came from chat users and platforms, so it is shown through `printable`: a
message carrying terminal escape sequences or bidirectional overrides must not reach the
operator's terminal as such.
"""

from __future__ import annotations

from collections.abc import Sequence

ALLOWED_FORMAT_CHARACTERS = frozenset("\u200d")
"""Zero-width joiner: harmless, and part of many emoji."""


def printable(text: str) -> str:
    """`text` with control, format (bidi overrides, zero-width), separator and unassigned
    characters written as `\\x1b` / `\\u202e` escapes; everything else unchanged."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in ALLOWED_FORMAT_CHARACTERS else _escaped(ch) for ch in text
    )


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], numbers: bool = False
) -> list[str]:
    """Each column as wide as its widest cell; with `numbers`, those after the first align right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(w) if numbers and i else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
