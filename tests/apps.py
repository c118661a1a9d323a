"""Building a whole `App` (access rules, guards, metrics) over the test store and fake clock."""

from __future__ import annotations

from bot.app import App
from bot.config import parse_config
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock


def make_app(
    store: SqliteStore,
    clock: FakeClock,
    replier: ScriptedReplier,
    frontend: RecordingFrontend,
    **sections: object,
) -> App:
    data: dict[str, object] = {
        "llm": {"provider": "offline", "failure_message": "sorry"},
        "debounce": {
            "adaptive": False,
            "speculate": False,
            "quiet_seconds": 1.5,
            "max_wait_seconds": 8.0,
        },
        "console": {"enabled": False},
    }
    data.update(sections)
    return App(parse_config(data), store, replier, [frontend], clock=clock, owner="w1")


async def step(app: App, clock: FakeClock, seconds: float = 2.0) -> None:
    """Let the quiet window pass on the fake clock, run what is due, wait for it to finish."""
    await clock.advance(seconds)
    await app.engine.run_due()
    await app.engine.idle()
    await app.engine.outbox.deliver_due()
    await app.engine.idle()


async def post_outbox(app: App) -> None:
    """Run the scheduler's outbox sweep once (a refusal's notice is an outbox row) and wait."""
    await app.engine.outbox.deliver_due()
    await app.engine.idle()
