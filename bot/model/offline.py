"""The offline replier: what `burstbot run` answers with when no model key is set."""

from __future__ import annotations

import asyncio
import re

from bot.model.replier import Prompt, Usage


class OfflineReplier:
    """Deterministic, no network: acknowledges the burst and quotes each of its messages.

    `token_delay` simulates a model streaming one word every so often (on the real event loop; the
    engine tests use their own fake replier instead).
    """

    def __init__(self, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay

    async def generate(self, prompt: Prompt, usage: Usage) -> str:
        count = len(prompt.burst)
        noun = "message" if count == 1 else "messages"
        lines = [f"Got your {count} {noun}:"]
        lines += [f"> {m.author_name}: {m.text}" for m in prompt.burst]
        text = "\n".join(lines)
        usage.input_tokens += sum(len(t.text.split()) for t in prompt.history)
        usage.input_tokens += len(prompt.burst_text().split())
        for word in re.findall(r"\S+\s*", text):  # one token a word, streamed as it comes
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            usage.output_tokens += 1
            usage.streamed.append(word)
        return text
