"""The offline replier: what `burstbot run` answers with when no model key is set."""

from __future__ import annotations

import asyncio
import re

from bot.core.attachments import LoadedFile, human_size
from bot.core.replier import GenerationProgress, Prompt


def _described(file: LoadedFile) -> str:
    """`[got image screenshot.png: 18.2 KB]`, or the file's note when it was not read."""
    if file.content is None:
        return file.note_line()
    return f"[got {file.kind} {file.attachment.name}: {human_size(len(file.content))}]"


class OfflineReplier:
    """Deterministic, no network: acknowledges the burst and quotes each of its messages, with a
    line for each file (what it got, or why not).

    `token_delay` simulates a model streaming one word every so often (on the real event loop; the
    engine tests use their own fake replier instead).
    """

    def __init__(self, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        count = len(prompt.burst)
        noun = "message" if count == 1 else "messages"
        lines = [f"Got your {count} {noun}:"]
        for m in prompt.burst:
            lines.append(f"> {m.heading()}")
            lines += [f"> {_described(f)}" for f in m.files]
        text = "\n".join(lines)
        usage.model = "offline"
        usage.input_tokens += sum(len(t.text.split()) for t in prompt.history)
        usage.input_tokens += len(prompt.burst_text().split())
        files = [f for t in prompt.history for f in t.files]
        files += [f for m in prompt.burst for f in m.files]
        usage.input_tokens += sum(f.tokens for f in files if f.content is not None)
        for word in re.findall(r"\S+\s*", text):  # one token a word, streamed as it comes
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            usage.output_tokens += 1
            usage.streamed.append(word)
        return text
