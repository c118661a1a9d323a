"""The GenAI semantic conventions' shapes for what a model request said, recorded on `chat`
spans only with `[telemetry] record_content = true` (bot/ops/traces.py): the system
instructions, the input messages and the output, each as JSON text."""

from __future__ import annotations

import json
from collections.abc import Mapping

PROVIDER = "anthropic"  # `gen_ai.provider.name`


def _parts(content: object) -> list[dict[str, str]]:
    """A message's content as parts: text as it is, any other block by its type only (an
    image's or a document's bytes never go into a span)."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    found: list[dict[str, str]] = []
    for block in content if isinstance(content, list) else []:
        kind = str(block.get("type", "")) if isinstance(block, Mapping) else ""
        if kind == "text":
            found.append({"type": "text", "content": str(block.get("text", ""))})
        else:
            found.append({"type": kind or "unknown"})
    return found


def input_messages(system: object, messages: object) -> tuple[str, str]:
    """`gen_ai.system_instructions` and `gen_ai.input.messages` for a Messages API request."""
    turns = [
        {"role": str(m.get("role", "")), "parts": _parts(m.get("content"))}
        for m in (messages if isinstance(messages, list) else [])
        if isinstance(m, Mapping)
    ]
    return json.dumps(_parts(system)), json.dumps(turns)


def output_messages(text: str, finish_reason: str) -> str:
    """`gen_ai.output.messages`: the one assistant message the request wrote."""
    part = {"type": "text", "content": text}
    return json.dumps([{"role": "assistant", "finish_reason": finish_reason, "parts": [part]}])
