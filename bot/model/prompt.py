"""Building one prompt per burst: earlier turns trimmed to a token budget, then the whole burst."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.store import HistoryItem, StoredMessage
from bot.model.replier import BurstMessage, Prompt, Turn, Voice


def estimate_tokens(text: str) -> int:
    """A cheap, conservative estimate (about four characters a token) used only for trimming."""
    return len(text) // 4 + 1


def build_prompt(
    voice: str | Voice,
    history: Sequence[HistoryItem],
    burst: Sequence[StoredMessage],
    max_context_tokens: int,
) -> Prompt:
    """The burst is always kept whole; history fills what budget is left, newest turns first.
    `voice` is the system prompt, or it with the conversation's model settings."""
    voice = Voice(voice) if isinstance(voice, str) else voice
    system = voice.system
    messages = tuple(BurstMessage(m.author_name, m.text) for m in burst)
    budget = max_context_tokens - estimate_tokens(system)
    budget -= sum(estimate_tokens(f"{m.author_name}: {m.text}") for m in messages)
    kept: list[Turn] = []
    for item in reversed(history):
        text = item.text if item.role == "assistant" else f"{item.author_name}: {item.text}"
        cost = estimate_tokens(text)
        if cost > budget:
            break
        budget -= cost
        kept.append(Turn(item.role, text))
    kept.reverse()
    return Prompt(system, tuple(kept), messages, voice.model, voice.max_tokens)
