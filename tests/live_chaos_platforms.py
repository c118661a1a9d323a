"""The live chaos run's platforms: the project's fake Slack, Discord and Messages API, made
unreliable the way the real ones are, and nothing more helpful than they are.

Rules these fakes keep:

- A bot's post or edit either fails before it lands (5xx, nothing changed), is rate-limited (429
  with Retry-After, nothing changed), lands and loses its answer (5xx after the change), or is
  slow: in flight for a while (not visible to any read), then lands, then answered later still
  (the whole call lasts longer than a lease). Everything else lands and answers at once.
- Slack never dedupes a post. Discord dedupes an `enforce_nonce` post per channel within its
  nonce window only (minutes on Discord; scaled here like the lease TTL).
- Slack `chat.update` on a message that is gone answers `message_not_found`; Discord PATCH
  answers 404 Unknown Message (10008) — the fakes' own behaviour, untouched.
- A person deletes a draft while it grows: right after an edit lands whose generation is still
  streaming (its final text cannot have been written yet), now and then.
- The model streams the burst's markers back slowly, under a tag naming its request (`g<n>`),
  with `g<n>end` as its last word, so every visible text tells which generation wrote it and
  whether it is whole; some answers are long enough to need several parts; some requests fail
  (an error status the SDK retries, an error event mid-stream, a stream that hangs).

`Ledger` counts what landed and what was injected; the checker reads the fakes' records.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from testkit.fake_anthropic import FakeAnthropic, Plan, RecordedRequest
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlackApi, PostedMessage

MARKER = re.compile(r"\b[sd]\d+m\d+\b")
TAG = re.compile(r"\bg(\d+)\b")


@dataclass(frozen=True)
class Faults:
    """Per platform call, the chance of each fault; times are in lease TTLs."""

    fail_before: float = 0.03
    rate_limited: float = 0.03
    lost_answer: float = 0.03
    slow: float = 0.05
    slow_in_flight: tuple[float, float] = (0.2, 0.6)  # not visible to a read meanwhile
    slow_total: tuple[float, float] = (1.1, 2.0)  # longer than a lease (and a delivery claim)
    retry_after: tuple[int, int] = (1, 2)  # whole seconds, as both platforms send them
    delete_draft: float = 0.06  # per edit of a draft whose generation still streams
    delete_surely_after: int = 10  # such edits without any deletion yet: the next one is deleted


@dataclass
class Ledger:
    """What the platforms saw happen: injected faults and people's deletions, by name."""

    counts: Counter[str] = field(default_factory=Counter)
    deleted_by_people: list[tuple[str, str, str]] = field(default_factory=list)  # where, id, text


class FaultRoller:
    """Decides one call's fate; shared by both platforms so the mix is the same."""

    def __init__(self, rng: random.Random, faults: Faults, ttl: float, ledger: Ledger) -> None:
        self.rng, self.faults, self.ttl, self.ledger = rng, faults, ttl, ledger
        self.delete_chances = 0

    def person_deletes(self) -> float | None:
        """Whether a person deletes the growing draft an edit just showed, and after how many
        seconds (None: not this time). Now and then by chance; and at once when
        `delete_surely_after` chances went by without any deletion yet, so that every run
        exercises it (left to chance alone, a run without one passed while checking nothing)."""
        self.delete_chances += 1
        if (
            not self.ledger.counts["people_deleted"]
            and self.delete_chances >= self.faults.delete_surely_after
        ):
            self.delete_chances = 0
            return 0.0
        if self.rng.random() >= self.faults.delete_draft:
            return None
        return self.rng.uniform(0.0, 0.2) * self.ttl

    def roll(self, platform: str) -> str:
        faults = self.faults
        roll = self.rng.random()
        chances = {"fail_before": faults.fail_before, "rate_limited": faults.rate_limited,
                   "lost_answer": faults.lost_answer, "slow": faults.slow}  # fmt: skip
        for name, chance in chances.items():
            if roll < chance:
                self.ledger.counts[f"{platform}_{name}"] += 1
                self.ledger.counts[name] += 1
                return name
            roll -= chance
        return "ok"

    def slow_times(self) -> tuple[float, float]:
        in_flight = self.rng.uniform(*self.faults.slow_in_flight) * self.ttl
        total = max(in_flight, self.rng.uniform(*self.faults.slow_total) * self.ttl)
        return in_flight, total - in_flight

    def retry_after(self) -> int:
        return self.rng.randint(*self.faults.retry_after)


class ChaoticSlack(FakeSlackApi):
    """The fake Slack Web API with faults on `chat.postMessage` and `chat.update`."""

    FAULTED = frozenset({"chat.postMessage", "chat.update"})

    def __init__(self, roller: FaultRoller, still_streaming: Callable[[str], bool]) -> None:
        super().__init__()
        self.roller = roller
        self.still_streaming = still_streaming
        self.landed_posts: list[PostedMessage] = []  # every bot post that landed, deleted or not

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method not in self.FAULTED:
            return await super()._handle(request)
        fate = self.roller.roll("slack")
        if fate == "fail_before":
            return web.json_response({"ok": False, "error": "internal_error"}, status=500)
        if fate == "rate_limited":
            after = str(self.roller.retry_after())
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": after}
            )
        answer_after = 0.0
        if fate == "slow":
            in_flight, answer_after = self.roller.slow_times()
            await asyncio.sleep(in_flight)
        response = await super()._handle(request)
        await asyncio.sleep(answer_after)
        if fate == "lost_answer":
            return web.json_response({"ok": False, "error": "internal_error"}, status=503)
        return response

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._chat_postMessage(args)
        if "ts" in result:
            self.landed_posts.append(self.messages[-1])
        return result

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._chat_update(args)
        if "error" not in result:
            self._maybe_delete_later(str(args["channel"]), str(args["ts"]), str(args["text"]))
        return result

    def _maybe_delete_later(self, channel: str, ts: str, text: str) -> None:
        roller = self.roller
        if not self.still_streaming(text) or (after := roller.person_deletes()) is None:
            return

        async def delete() -> None:
            await asyncio.sleep(after)
            found = [m for m in self.messages if m.channel == channel and m.ts == ts]
            if found and self.still_streaming(found[0].text):
                self.messages.remove(found[0])
                roller.ledger.counts["people_deleted"] += 1
                roller.ledger.deleted_by_people.append((channel, ts, found[0].text))

        _background(delete())

    def say(self, channel: str, text: str) -> str:
        """A person's message lands in the DM's history; returns its ts for the event."""
        ts = self._next_ts()
        self.add_user_message(channel, ts, text)
        return ts


class ChaoticDiscord(FakeDiscord):
    """The fake Discord with faults on bot posts and edits (discord.py retries some itself:
    500/502 after a pause, 429 after its `retry_after`)."""

    def __init__(
        self, roller: FaultRoller, still_streaming: Callable[[str], bool], nonce_window: float
    ) -> None:
        super().__init__(nonce_window_seconds=nonce_window)
        self.roller = roller
        self.still_streaming = still_streaming
        self.landed_posts: list[dict[str, Any]] = []  # every bot post that landed, deleted or not
        self.deduped = 0

    def _fault_response(self, fate: str) -> web.Response | None:
        if fate == "fail_before":
            status = self.roller.rng.choice((500, 502, 503))
            return _discord_json({"message": f"{status}: server error", "code": 0}, status)
        if fate == "rate_limited":
            after = self.roller.retry_after()
            body = {"message": "You are being rate limited.", "retry_after": float(after),
                    "global": False}  # fmt: skip
            headers = {"Retry-After": str(after), "Via": "1.1 google", "X-RateLimit-Scope": "user"}
            return _discord_json(body, 429, headers)
        return None

    async def _post_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _discord_json({"message": "401: Unauthorized", "code": 0}, 401)
        channel_id = int(request.match_info["channel_id"])
        body: dict[str, Any] = await request.json()
        self.requests.append(body)
        fate = self.roller.roll("discord")
        refused = self._fault_response(fate)
        if refused is not None:
            return refused
        answer_after = 0.0
        if fate == "slow":
            in_flight, answer_after = self.roller.slow_times()
            await asyncio.sleep(in_flight)
        message = self.earlier_post(channel_id, body)
        if message is None:
            message = self.create_post(channel_id, body)
            self.landed_posts.append(message)
        else:
            self.deduped += 1
        await asyncio.sleep(answer_after)
        if fate == "lost_answer":
            return _discord_json({"message": "500: Internal Server Error", "code": 0}, 500)
        return _discord_json(message)

    async def _edit_message(self, request: web.Request) -> web.Response:
        fate = self.roller.roll("discord")
        refused = self._fault_response(fate)
        if refused is not None:
            return refused
        answer_after = 0.0
        if fate == "slow":
            in_flight, answer_after = self.roller.slow_times()
            await asyncio.sleep(in_flight)
        response = await super()._edit_message(request)
        if response.status == 200:
            channel, message_id = request.match_info["channel_id"], request.match_info["message_id"]
            self._maybe_delete_later(int(channel), message_id)
        await asyncio.sleep(answer_after)
        if fate == "lost_answer":
            return _discord_json({"message": "500: Internal Server Error", "code": 0}, 500)
        return response

    def _maybe_delete_later(self, channel_id: int, message_id: str) -> None:
        roller = self.roller

        def current() -> dict[str, Any] | None:
            history = self.history.get(channel_id, [])
            return next((m for m in history if m["id"] == message_id), None)

        message = current()
        if message is None or not self.still_streaming(message["content"]):
            return
        if (after := roller.person_deletes()) is None:
            return

        async def delete() -> None:
            await asyncio.sleep(after)
            message = current()
            if message is not None and self.still_streaming(message["content"]):
                self.history[channel_id].remove(message)
                roller.ledger.counts["people_deleted"] += 1
                roller.ledger.deleted_by_people.append(
                    (str(channel_id), message_id, message["content"])
                )

        _background(delete())


_tasks: set[asyncio.Task[None]] = set()


def _background(work: Any) -> None:
    """A person's later action: kept referenced until it ran."""
    task = asyncio.ensure_future(work)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _discord_json(
    data: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    import json

    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=all_headers)


@dataclass(frozen=True)
class ModelFaults:
    overloaded: float = 0.05  # 529 before the stream; the SDK retries it itself
    error_mid_stream: float = 0.04  # an `error` event after some deltas
    hang: float = 0.01  # stops sending until the call's timeout
    long_answer: float = 0.12  # long enough for several parts on both platforms
    delay: tuple[float, float] = (0.05, 0.12)  # seconds between deltas: drafts get several edits


class ChaoticModel:
    """The fake Messages API's script: every answer quotes the burst's markers under its tag."""

    LONG_CHARS = 4_600  # > Slack's 3500-character part and two of Discord's 2000

    def __init__(self, rng: random.Random, faults: ModelFaults, ledger: Ledger) -> None:
        self.rng, self.faults, self.ledger = rng, faults, ledger
        self.server = FakeAnthropic(reply=self.answer)
        self.server.on_request = self.plan
        self._long: set[int] = set()  # requests (by number) whose answer is long

    def answer(self, request: RecordedRequest) -> str:
        number = len(self.server.requests)
        tag = f"g{number}"
        words = [tag, "saw:", *MARKER.findall(request.last_user_text)]
        if number in self._long:
            words += [tag] * (self.LONG_CHARS // (len(tag) + 1))
        return " ".join([*words, f"{tag}end"])

    def plan(self, request: RecordedRequest) -> None:
        faults, rng = self.faults, self.rng
        roll = rng.random()
        delay = rng.uniform(*faults.delay)
        if roll < faults.overloaded:
            self.ledger.counts["model_overloaded"] += 1
            self.server.queue(Plan(status=529, retry_after=0.2))
            return
        roll -= faults.overloaded
        plan = Plan(delay=delay)
        if rng.random() < faults.long_answer:
            self.ledger.counts["long_answers"] += 1
            self._long.add(len(self.server.requests))
            plan.words_per_delta = 100  # about ten deltas, not hundreds
        if roll < faults.error_mid_stream:
            self.ledger.counts["model_error_mid_stream"] += 1
            plan.error_after = rng.randint(1, 4)
        elif roll < faults.error_mid_stream + faults.hang:
            self.ledger.counts["model_hang"] += 1
            plan.pause_after = rng.randint(1, 4)
        self.server.queue(plan)

    def still_streaming(self, text: str) -> bool:
        """Whether the generation that wrote `text` is still streaming (so its answer's final
        edit cannot have happened yet)."""
        found = TAG.search(text)
        if found is None:
            return False
        index = int(found.group(1)) - 1
        streams = [s for s in self.server.streams if s.request_index == index]
        return bool(streams) and streams[-1].outcome == "streaming"
