"""Named events the engine and the outbox announce (`accepted`, `superseded`, `delivered`, ...).

Metrics and tests subscribe; the pipeline calls each listener in turn and never learns who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from bot.core.store import GenerationRecord

Listener = Callable[[str, dict[str, object]], None]


class Signals:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, name: str, /, **fields: object) -> None:
        for listener in self._listeners:
            listener(name, fields)

    def generation(self, record: GenerationRecord) -> None:
        """Every generation ends in one record; listeners get its outcome, model and tokens."""
        fields = {"outcome": record.outcome, "model": record.model, "error": record.error,
                  **asdict(record.usage)}  # fmt: skip
        self.emit("generation", conversation=record.conversation_id, **fields)
