"""Stopping an engine the way `burstbot run` does, for tests and benchmarks that drive one without
the app (the app also stops its front ends between these steps, see `bot/app.py`)."""

from __future__ import annotations

from bot.core.engine import Engine


async def shut_down(engine: Engine, grace: float = 0.0) -> None:
    """Stop taking work, cancel generations, let deliveries finish within `grace`, release the
    engine's leases and claims; timers and the outbox stay in the database."""
    engine.stop_taking_work()
    await engine.finish(grace)
    await engine.release()
