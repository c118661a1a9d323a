"""`burstbot demo`: a scripted fast typer against the offline replier, in real time.

It types three bursts: one reply per burst; the third burst gets a late message while the bot is
already answering, so that generation is cancelled and one reply covers everything. Then it
prints the conversation's timeline, as `burstbot explain` would.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from bot.cli.explain import explain_lines
from bot.config import Config, parse_config
from bot.core.events import ConversationKey, IncomingMessage, Reply
from bot.core.frontend import Frontend, Host
from bot.core.replier import Replier
from bot.llm.offline import OfflineReplier
from bot.wiring import build_store

if TYPE_CHECKING:
    from storage.sql_store import SqlStore

DEMO_KEY = ConversationKey("console", "demo", "terminal")
SCRIPT: list[tuple[list[str], list[str]]] = [
    # (typed quickly, typed while the bot is already answering)
    (["hi!", "quick question", "how do I rotate my API key?"], []),
    (["thanks", "one more thing"], ["where do I find the audit log?"]),
    (["ok", "that's all"], []),
]
STEP_TIMEOUT = 30.0


class DemoApp(Protocol):
    """The app the entry point builds the demo with (`bot/app.py`'s `App`, which this command
    does not import)."""

    def subscribe(self, listener: Callable[[str, dict[str, object]], None]) -> None: ...

    async def run(self) -> None: ...


class DemoTyper:
    platform = "console"

    def __init__(self, out: TextIO, typing_gap: float) -> None:
        self.out = out
        self.typing_gap = typing_gap
        self.started = time.monotonic()
        self.events: asyncio.Queue[str] = asyncio.Queue()
        self.failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._printed: set[str] = set()
        self.sent = 0  # messages typed so far

    def listen(self, name: str, fields: dict[str, object]) -> None:
        if fields.get("conversation") == DEMO_KEY.id and name in {"generating", "delivered"}:
            self.events.put_nowait(name)

    def say(self, who: str, text: str) -> None:
        stamp = f"[{time.monotonic() - self.started:6.2f}s]"
        label = f"{who}: " if who else ""
        indent = "\n" + " " * (len(stamp) + 1 + len(label))
        self.out.write(f"{stamp} {label}{indent.join(text.splitlines())}\n")
        self.out.flush()

    async def start(self, host: Host) -> None:
        self._task = asyncio.create_task(self._type(host))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _wait_for(self, name: str) -> None:
        while await asyncio.wait_for(self.events.get(), STEP_TIMEOUT) != name:
            pass

    async def _send(self, host: Host, text: str) -> None:
        self.sent += 1
        self.say("you", text)
        await host.ingest(IncomingMessage(DEMO_KEY, f"demo-{self.sent}", "demo-user", "you", text))

    async def _type(self, host: Host) -> None:
        try:
            for quick, late in SCRIPT:
                for text in quick:
                    await self._send(host, text)
                    await asyncio.sleep(self.typing_gap)
                if late:
                    await self._wait_for("generating")
                    await asyncio.sleep(0.15)  # let the offline model stream a few words
                    self.say("", "(the bot has started answering… and you keep typing)")
                    for text in late:
                        await self._send(host, text)
                await self._wait_for("delivered")
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            host.request_stop()

    async def deliver(self, reply: Reply) -> list[str]:
        if reply.id not in self._printed:
            self._printed.add(reply.id)
            self.say("burstbot", reply.text)
        return [reply.id]

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        return None


def demo_config(database: Path, quiet: float) -> Config:
    return parse_config(
        {
            "storage": {"url": f"sqlite:///{database}"},
            "debounce": {"quiet_seconds": quiet, "max_wait_seconds": max(quiet * 6, 3.0)},
            "engine": {"poll_seconds": 0.2, "owner": "demo"},
            "llm": {"provider": "offline"},
            "console": {"enabled": False},
        }
    )


async def run_demo(
    build_app: Callable[[Config, SqlStore[Any], Replier, list[Frontend]], DemoApp],
    quiet: float = 0.6,
    out: TextIO | None = None,
    keep: Path | None = None,
) -> int:
    """`keep`: write the demo's database there and leave it (for `burstbot usage`, `explain`)."""
    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="burstbot-demo-") as folder:
        database = keep or Path(folder) / "demo.db"
        config = demo_config(database, quiet)
        typer = DemoTyper(out, typing_gap=quiet / 4)
        replier = OfflineReplier(token_delay=0.05)
        app = build_app(config, build_store(config), replier, [typer])
        app.subscribe(typer.listen)
        out.write(f"burstbot demo: quiet window {quiet:g}s; offline replier\n\n")
        await app.run()
        if typer.failure is not None:
            out.write(f"demo did not finish: {typer.failure!r}\n")
            return 1
        store = build_store(config)
        await store.open()
        try:
            lines = await explain_lines(store, DEMO_KEY.id, time.time()) or []
        finally:
            await store.close()
        out.write("\n" + "\n".join(lines) + "\n")
        if keep is not None:
            url = f"sqlite:///{keep}"
            out.write(f"\nkept the database at {keep}: try `burstbot usage` with [storage] url = "
                      f"{url!r}\n")  # fmt: skip
    return 0
