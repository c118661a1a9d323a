"""One chaos worker process: the real App (engine, scheduler, store) on a shared database.

It takes messages over HTTP (`POST /ingest`, like Slack's HTTP mode behind a load balancer), runs a
replier that streams slowly and fails at random (rate limit, overload, timeout), and posts replies
to the fake platform in the parent process, split into parts, the way the real adapters do: in a
Discord-like conversation each part carries a nonce derived from the reply id and the process
remembers the parts it saw posted; in a Slack-like one a re-delivery first reads back the parts the
platform already shows for that reply id.

Run by `tests/chaos_run.py`: `python -m tests.chaos_worker '<json settings>'`; prints
`READY <port>` once it serves, and exits on SIGTERM (SIGKILL is the point of the exercise).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import ClientResponse, web

from bot.app import App
from bot.config import Config, parse_config
from bot.core.errors import PermanentDeliveryError, RetryableDeliveryError, RetryableReplierError
from bot.core.events import ConversationKey, Draft, IncomingMessage, Reply
from bot.core.frontend import Drafting, Host
from bot.core.replier import GenerationProgress, Prompt
from bot.wiring import build_store
from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from tests.chaos_run import SLACK, mode_of, split_text

PLATFORM = "chaos"


class ChaosReplier:
    """Quotes the burst back word by word; sometimes rate-limited, overloaded or hanging."""

    def __init__(self, rng: random.Random, settings: dict[str, Any]) -> None:
        self.rng = rng
        self.timeout = float(settings["generation_timeout"])
        self.token_delay = float(settings["token_delay"])
        self.p_rate_limit = float(settings["p_rate_limit"])
        self.p_overload = float(settings["p_overload"])
        self.p_hang = float(settings["p_hang"])

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        roll = self.rng.random()
        try:
            async with asyncio.timeout(self.timeout):
                if roll < self.p_rate_limit:
                    await asyncio.sleep(self.token_delay)
                    raise RetryableReplierError("429 rate_limit_error (injected)")
                roll -= self.p_rate_limit
                if roll < self.p_overload:
                    await asyncio.sleep(self.token_delay)
                    raise RetryableReplierError("529 overloaded_error (injected)")
                roll -= self.p_overload
                if roll < self.p_hang:
                    await asyncio.sleep(self.timeout * 10)
                words = [m.text for m in prompt.burst]
                shown = ["saw:", *words]  # streamed as it goes (a draft shows it)
                for n in range(4 + 2 * len(words)):
                    await asyncio.sleep(self.token_delay * self.rng.uniform(0.5, 1.5))
                    usage.output_tokens += 1
                    if n < len(shown):
                        usage.streamed.append(shown[n] if n == 0 else " " + shown[n])
                return "saw: " + " ".join(words)
        except TimeoutError:
            raise RetryableReplierError("generation timed out (injected hang)") from None


class PlatformFrontend(Drafting):
    """The chaos platform's adapter: messages come in over HTTP, replies go out to the fake
    platform, whose answers map to the delivery error tree."""

    platform = PLATFORM

    def __init__(self, base_url: str, owner: str, streaming: bool = False) -> None:
        self.base_url = base_url
        self.owner = owner
        self.drafts = self if streaming else None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._posted: dict[str, dict[int, str]] = {}  # Discord-like: reply id -> parts posted

    async def start(self, host: Host) -> None:
        async def ingest(request: web.Request) -> web.Response:
            data = await request.json()
            key = ConversationKey(PLATFORM, "w", str(data["channel"]))
            message = IncomingMessage(
                key, str(data["id"]), str(data["author"]), "user", data["text"]
            )
            result = await host.ingest(message)
            return web.json_response({"status": result.status, "version": result.version})

        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        app = web.Application()
        app.router.add_post("/ingest", ingest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        print(f"READY {self._runner.addresses[0][1]}", flush=True)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def deliver(self, reply: Reply) -> list[str]:
        parts = split_text(reply.text)
        if mode_of(reply.key.channel) == SLACK:
            posted = await self._shown(reply) if reply.attempt > 1 else {}
        else:  # like the Discord adapter: what this process saw posted, then the nonce
            posted = self._posted.setdefault(reply.id, dict(enumerate(reply.already_posted)))
        for index, text in enumerate(parts):
            if index in posted:
                continue
            reply.fence.check()  # a delivery whose claim was taken stops before its next part
            if index == 0 and reply.draft is not None:  # the streamed draft, finished
                posted[index] = await self._finish(reply, reply.draft, len(parts), text)
            else:
                posted[index] = await self._post(reply, index, len(parts), text)
            await reply.fence.posted(index, posted[index])
        return [posted[index] for index in range(len(parts))]

    # streaming (the core's DraftSurface): a draft is one post, then edits ---------------------
    nonce_window = 0.0  # the worker learns nothing from re-sending: it reads back first

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        body = {"reply": draft.key, "part": 0, "parts": 1, "nonce": draft.key,
                "channel": key.channel, "conversation": key.id, "text": text,
                "owner": self.owner, "attempt": 1}  # fmt: skip
        async with self._call("post", "/post", json=body) as response:
            return str((await response.json())["id"])

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        """Read back by the key (what the platform shows); a post in flight does not show."""
        async with self._call("get", "/posts", params={"reply": draft.key}) as response:
            found = (await response.json())["parts"].get("0")
        return None if found is None else str(found)

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        async with self._call("post", "/edit", json={"id": message_id, "text": text}):
            return None

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        raise PermanentDeliveryError("the chaos platform deletes nothing (no deletes are sent)")

    async def _finish(self, reply: Reply, draft: Draft, parts: int, text: str) -> str:
        message_id = draft.message_id or await self.post_draft(reply.key, draft, text)
        body = {"id": message_id, "text": text, "reply": reply.id, "parts": parts}
        async with self._call("post", "/edit", json=body):
            return message_id

    async def _post(self, reply: Reply, part: int, parts: int, text: str) -> str:
        body = {"reply": reply.id, "part": part, "parts": parts, "nonce": f"{reply.id}.{part}",
                "channel": reply.key.channel, "conversation": reply.key.id, "text": text,
                "owner": self.owner, "attempt": reply.attempt}  # fmt: skip
        async with self._call("post", "/post", json=body) as response:
            return str((await response.json())["id"])

    async def _shown(self, reply: Reply) -> dict[int, str]:
        """The parts of this reply the conversation already shows (Slack: found by metadata)."""
        async with self._call("get", "/posts", params={"reply": reply.id}) as response:
            shown = (await response.json())["parts"]
        return {int(part): str(post_id) for part, post_id in shown.items()}

    @contextlib.asynccontextmanager
    async def _call(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[ClientResponse]:
        """One platform call; its failures mapped to the delivery error tree."""
        assert self._session is not None
        try:
            async with self._session.request(method, self.base_url + path, **kwargs) as response:
                if response.status == 429:
                    after = response.headers.get("Retry-After")
                    raise RetryableDeliveryError(
                        "platform said 429", float(after) if after else None
                    )
                if response.status >= 500:
                    raise RetryableDeliveryError(f"platform said {response.status}")
                if response.status != 200:
                    raise PermanentDeliveryError(f"platform said {response.status}")
                yield response
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RetryableDeliveryError(f"platform unreachable: {exc!r}") from exc

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        return None


def config_for(settings: dict[str, Any]) -> Config:
    engine = settings["engine"]
    return parse_config(
        {
            "storage": {"url": settings["db_url"], "pool_size": 4},
            "debounce": {"adaptive": False, "quiet_seconds": engine["quiet_seconds"],
                         "max_wait_seconds": engine["max_wait_seconds"]},
            "lease": {"ttl_seconds": engine["lease_ttl_seconds"]},
            "engine": {"max_concurrent_generations": engine["max_concurrent_generations"],
                       "poll_seconds": engine["poll_seconds"],
                       "busy_retry_seconds": engine["busy_retry_seconds"],
                       "delivery_max_attempts": engine["delivery_max_attempts"],
                       "delivery_backoff_seconds": engine["delivery_backoff_seconds"],
                       "owner": settings["owner"]},
            "llm": {"provider": "offline", "max_attempts": engine["model_max_attempts"],
                    "retry_backoff_seconds": engine["model_backoff_seconds"],
                    "failure_message": engine["failure_message"]},
            "console": {"enabled": False},
            # the run checks delivery, not budgets: a budget notice would stand in for an answer
            "limits": {"user_daily_tokens": 0, "channel_daily_tokens": 0},
            "streaming": {"enabled": bool(settings.get("streaming")),
                          "interval_seconds": settings.get("streaming_interval", 1.0)},
        }
    )  # fmt: skip


def store_for(config: Config, settings: dict[str, Any]) -> SqlStore:
    """The App's store; on SQLite with a busy timeout shorter than the parent's longer locks."""
    url = config.storage.url
    if url.startswith("sqlite:///"):
        return SqliteStore(url.removeprefix("sqlite:///"), int(settings["sqlite_busy_timeout_ms"]))
    return build_store(config)


async def serve(settings: dict[str, Any]) -> None:
    """The real composition root (`App`: store, engine, scheduler, wake-up hints, SIGTERM)."""
    config = config_for(settings)
    streaming = bool(settings.get("streaming"))
    frontend = PlatformFrontend(str(settings["platform_url"]), config.engine.owner, streaming)
    replier = ChaosReplier(random.Random(), settings)
    await App(config, store_for(config, settings), replier, [frontend]).run()


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1])))
