"""`printable`: what operators' commands (`burstbot status`, `burstbot explain`) show.

Everything stored came from chat users and platforms, so it is shown through `printable`: a
message carrying terminal escape sequences or bidirectional overrides must not reach the
operator's terminal as such.
"""

from __future__ import annotations

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


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
