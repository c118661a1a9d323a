"""Nothing waits unseen, on the real adapters: a burst held back for capacity (the Messages API's
per-minute limits, bot/core/admission.py) shows the thinking indicator the way its platform
shows it while it waits, and the indicator ends once the answer is posted.

Slack: Bolt and `AsyncWebClient` against the fake Slack; Discord: discord.py against the fake
Discord; both with the real Claude replier against the fake Messages API, whose per-minute
budgets replenish on the test's fake clock (as in tests/test_admission.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.app import App
from bot.config import Config, parse_config
from bot.core.cpu_budget import WAITING_FOR as CPU
from bot.core.cpu_budget import CpuBudget
from bot.core.events import ConversationKey
from bot.core.replier import Replier
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit.clock import FakeClock
from testkit.engine import shut_down
from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.fake_discord import FakeDiscord, frontend_for
from testkit.fake_slack import TEAM, FakeSlackApi, assistant_event, dm
from tests.slack_harness import Bot, running_bot, ts
from tests.test_admission import limited
from tests.test_cpu_admission import Meter
from tests.test_discord_wire import ALICE, DM_ID, eventually
from tests.test_slack_thinking_steps import until
from tests.tool_harness import KEY_ENV

QUIET = 1.5  # the Slack harness's quiet window
DELAY = 1.0  # `indicator_delay_seconds`, the default


def llm_section(server: FakeAnthropic) -> dict[str, Any]:
    """The SDK's own retries off: a start admission let through is one request."""
    return {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0}


def claude(config: Config) -> Replier:
    return claude_replier(config, KEY_ENV)


# Slack ------------------------------------------------------------------------------------------
SURFACES: dict[str, dict[str, Any]] = {
    "assistant status": {"status_supported": True},  # assistant.threads.setStatus
    "agent session": {"agent": True},  # agents.sessions.setStatus processing / active
    "reaction": {},  # a top-level DM: the thinking reaction on the burst's message
}


@pytest.fixture(params=list(SURFACES))
async def slack(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, FakeSlackApi]]:
    api = await FakeSlackApi(**SURFACES[request.param]).start()
    yield request.param, api
    await api.stop()


class SlackThread:
    """One conversation of the parametrised surface: where a person writes and where the
    indicator shows (the thread's status or session, or a reaction on the message)."""

    def __init__(self, surface: str, api: FakeSlackApi, n: int) -> None:
        self.surface, self.api = surface, api
        self.root, self.message = ts(10 * n), ts(10 * n + 1)
        self.threaded = surface != "reaction"  # a top-level DM: one conversation per DM
        self.channel = "D1" if self.threaded else f"D{n}"
        self.key = ConversationKey("slack", TEAM, self.channel, self.root if self.threaded else "")

    async def ask(self, bot: Bot, text: str) -> None:
        if self.threaded:
            started = assistant_event("assistant_thread_started", "D1", self.root, "U1")
            assert await bot.send(started) == 200
            assert await bot.send(dm(self.message, text, thread_ts=self.root)) == 200
        else:
            assert await bot.send(dm(self.message, text, channel=self.channel)) == 200

    def shown(self) -> bool:
        """What a person sees now: is the bot shown thinking here?"""
        if self.surface == "assistant status":  # Slack removes it two minutes after it is set
            return bool(self.api.status_shown("D1", self.root))
        if self.surface == "agent session":
            return self.api.agents.sessions.get(("D1", self.root)) == "processing"
        return any(r[:2] == (self.channel, self.message) for r in self.api.reactions)

    def answers(self) -> list[str]:
        thread = self.root if self.threaded else None
        return [m.text for m in self.api.posts(self.channel) if m.thread_ts == thread and m.text]


async def test_a_slack_burst_held_by_the_api_limits_shows_thinking_until_answered(
    slack: tuple[str, FakeSlackApi], server: FakeAnthropic
) -> None:
    surface, api = slack
    clock = FakeClock()
    api.clock = clock.monotonic
    limited(server, clock, requests_per_minute=1)
    async with running_bot(api, clock=clock, sections={"llm": llm_section(server)},
                           llm=claude) as bot:  # fmt: skip
        first, held = SlackThread(surface, api, 1), SlackThread(surface, api, 2)
        await first.ask(bot, "the first question")
        await bot.step(QUIET)  # its window closes: it starts, and the API tells its limits
        await bot.step()
        assert len(first.answers()) == 1 and not first.shown()

        await held.ask(bot, "the second question")
        await bot.step(QUIET)  # its window closes: the minute's one request is spent
        assert bot.app.engine.ready_at > clock.now() + 30.0
        await bot.step(DELAY + 0.1)
        assert held.answers() == [] and held.shown()  # it waits, and it is seen waiting
        await bot.step(30.0)
        assert held.answers() == [] and held.shown()

        await bot.step(bot.app.engine.ready_at - clock.now())  # the minute replenished
        await bot.step()
        assert len(held.answers()) == 1 and not held.shown()
        [generation] = await bot.store.generations(held.key.id)
        assert generation.waited_for == "requests per minute" and generation.waited > 30.0


async def test_an_assistant_thread_held_past_slack_s_two_minutes_still_shows_its_status(
    server: FakeAnthropic,
) -> None:
    """Slack removes an assistant thread's status two minutes after it is set if no message was
    sent: a burst waiting longer (third in line for one request a minute) must stay seen."""
    api = await FakeSlackApi(status_supported=True).start()
    clock = FakeClock()
    api.clock = clock.monotonic
    limited(server, clock, requests_per_minute=1)
    try:
        async with running_bot(api, clock=clock, sections={"llm": llm_section(server)},
                               llm=claude) as bot:  # fmt: skip
            threads = [SlackThread("assistant status", api, n) for n in range(1, 5)]
            await threads[0].ask(bot, "the first question")
            await bot.step(QUIET)  # it starts, and the API tells its limits
            for thread in threads[1:]:
                await thread.ask(bot, "a question in line")
            await bot.step(QUIET)
            await bot.step(DELAY + 0.1)
            last, since = threads[-1], clock.now()
            while not last.answers():
                assert last.shown(), f"unseen {clock.now() - since:.0f} s into its wait"
                await bot.step(15.0)
            [generation] = await bot.store.generations(last.key.id)
            assert generation.waited > 150.0 and not last.shown()
    finally:
        await api.stop()


async def test_a_slack_burst_held_for_this_process_s_cpu_shows_its_status(
    server: FakeAnthropic,
) -> None:
    """Held while the process is saturated (bot/core/cpu_budget.py; the meter is the test's,
    as in tests/test_cpu_admission.py) with one generation running: seen all along."""
    api = await FakeSlackApi(status_supported=True).start()
    clock, meter = FakeClock(), Meter()
    api.clock = clock.monotonic
    server.queue(Plan(text="a long answer, still being written", pause_after=1))
    try:
        async with running_bot(api, clock=clock, sections={"llm": llm_section(server)},
                               llm=claude) as bot:  # fmt: skip
            engine = bot.app.engine
            engine.cpu = CpuBudget(meter, clock.monotonic)

            async def tick(seconds: float, busy: bool = True) -> None:
                meter.spent += 0.95 * seconds if busy else 0.0  # 95 % of a core
                await clock.advance(seconds)  # no engine.idle(): the first generation is paused
                await engine.indicator.idle()
                await engine.run_due()
                await engine.indicator.idle()
                await bot.frontend.statuses.idle()

            running, held = SlackThread("assistant status", api, 1), SlackThread(
                "assistant status", api, 2)  # fmt: skip
            await running.ask(bot, "the first question")
            await clock.advance(QUIET / 2)
            await held.ask(bot, "the second question")  # asked before the first one starts
            await clock.advance(QUIET / 2)
            assert await engine.run_due() == 1
            await until(lambda: len(server.requests) == 1)  # generating, paused by the plan
            for _ in range(10):
                await tick(1.0)
            assert held.answers() == [] and held.shown()
            server.release()
            await engine.idle()  # the first answer is written
            await tick(1.0, busy=False)  # the next window measures an idle process
            await bot.step()
            await bot.step()
            assert len(held.answers()) == 1 and not held.shown()
            [generation] = await bot.store.generations(held.key.id)
            assert generation.waited_for == CPU and generation.waited > 5.0
    finally:
        await api.stop()


# Discord ----------------------------------------------------------------------------------------
DM_KEY = ConversationKey("discord", "dm", str(DM_ID))


class DiscordBot:
    """One process on the fake Discord, with the Claude replier on the fake API."""

    def __init__(
        self,
        fake: FakeDiscord,
        store: SqliteStore,
        clock: FakeClock,
        server: FakeAnthropic,
        speculate: bool = False,
    ) -> None:
        self.fake, self.store, self.clock = fake, store, clock
        self.config = parse_config({
            "llm": llm_section(server), "console": {"enabled": False},
            "debounce": {"quiet_seconds": 1.0, "max_wait_seconds": 8.0, "adaptive": False,
                         "speculate": speculate, "speculate_after_seconds": 0.3},
        })  # fmt: skip
        self.front = frontend_for(fake, clock)
        self.replier = claude_replier(self.config, KEY_ENV)
        self.app = App(self.config, store, self.replier, [self.front], clock=clock, owner="w1")

    async def say(self, text: str, version: int) -> None:
        await self.fake.dispatch("MESSAGE_CREATE", self.fake.message(DM_ID, ALICE, text))

        async def stored() -> bool:
            state = await self.store.conversation_state(DM_KEY.id)
            return state is not None and state.version == version

        await eventually(stored)

    async def step(self, seconds: float = 0.0) -> None:
        engine = self.app.engine
        await self.clock.advance(seconds)
        await engine.indicator.idle()
        await self.front.typing.idle()
        await engine.run_due()
        await engine.idle()
        await engine.indicator.idle()
        await self.front.typing.idle()

    def typed(self) -> int:
        return self.fake.typing.count(DM_ID)

    async def typing_goes_on(self, seconds: float) -> None:
        """Discord shows each trigger for 10 s: while unanswered, one comes every 10 s at most."""
        for _ in range(round(seconds / 10.0)):
            before = self.typed()
            await self.step(10.0)
            assert len(self.fake.created) == 1 and self.typed() > before

    async def close(self) -> None:
        await self.front.typing.close()
        await shut_down(self.app.engine)
        await self.front.stop()
        await self.replier.aclose()


@pytest.fixture
async def discord_bot(
    request: pytest.FixtureRequest,
    fake_discord: FakeDiscord,
    store: SqliteStore,
    clock: FakeClock,
    server: FakeAnthropic,
) -> AsyncIterator[DiscordBot]:
    """`speculating` (indirect parameter): early starts 0.3 s after the last message."""
    speculate = getattr(request, "param", "") == "speculating"
    bot = DiscordBot(fake_discord, store, clock, server, speculate)
    await bot.front.start(bot.app)
    yield bot
    await bot.close()


async def test_a_discord_burst_held_by_the_api_limits_types_until_answered(
    discord_bot: DiscordBot, clock: FakeClock, server: FakeAnthropic
) -> None:
    bot, fake = discord_bot, discord_bot.fake
    limited(server, clock, requests_per_minute=1)
    await bot.say("the first question", 1)
    await bot.step(1.0)  # its window closes: it starts, and the API tells its limits
    assert len(fake.created) == 1

    await bot.say("the second question", 2)
    await bot.step(1.0)  # its window closes: the minute's one request is spent
    assert bot.app.engine.ready_at > clock.now() + 30.0
    before = bot.typed()
    await bot.step(DELAY + 0.1)
    assert len(fake.created) == 1 and bot.typed() > before  # it waits, and it is seen waiting
    await bot.typing_goes_on(40.0)

    await bot.step(bot.app.engine.ready_at - clock.now())  # the minute replenished
    assert len(fake.created) == 2
    assert DM_KEY.id not in bot.front.typing.active()
    before = bot.typed()
    await bot.step(30.0)
    assert bot.typed() == before  # answered: no more typing
    [generation] = [g for g in await bot.store.generations(DM_KEY.id) if g.waited > 0]
    assert generation.waited_for == "requests per minute" and generation.waited > 30.0


@pytest.mark.parametrize("discord_bot", ["speculating"], indirect=True)
async def test_a_burst_held_from_its_early_start_types_once_its_window_closes(
    discord_bot: DiscordBot, clock: FakeClock, server: FakeAnthropic
) -> None:
    """Speculation starts a burst before its window closes, when capacity is spare: held there,
    it shows nothing while the window is open (G4) and types from the indicator's usual time."""
    bot, fake = discord_bot, discord_bot.fake
    limited(server, clock, requests_per_minute=1)
    await bot.say("the first question", 1)
    await bot.step(1.0)  # it starts, and the API tells its limits
    assert len(fake.created) == 1

    await bot.say("the second question", 2)
    waits: list[dict[str, object]] = []
    bot.app.engine.subscribe(lambda name, fields: waits.append(fields) if name == "capacity_wait"
                             else None)  # fmt: skip
    before = bot.typed()
    await bot.step(0.3)  # due at its early start: held
    assert [w["conversation"] for w in waits] == [DM_KEY.id]
    await bot.step(0.7)  # its window closes, still held
    assert bot.typed() == before
    await bot.step(DELAY + 0.1)
    assert len(fake.created) == 1 and bot.typed() > before
    await bot.typing_goes_on(40.0)
    await bot.step(bot.app.engine.ready_at - clock.now())
    assert len(fake.created) == 2 and DM_KEY.id not in bot.front.typing.active()


async def test_a_discord_burst_held_for_minutes_by_a_429_types_all_along(
    discord_bot: DiscordBot, clock: FakeClock, server: FakeAnthropic
) -> None:
    """A 429 whose retry-after is long holds every start that long: typing goes on throughout."""
    bot, fake = discord_bot, discord_bot.fake
    limited(server, clock, requests_per_minute=1_000)
    await bot.say("the first question", 1)
    await bot.step(1.0)  # it starts, and the API tells its limits
    assert len(fake.created) == 1

    server.queue(Plan(status=429, retry_after=600.0))
    await bot.say("the second question", 2)
    await bot.step(1.0)  # it starts and meets the 429: it is tried again once the hold ends
    await bot.step(DELAY + 0.1)
    await bot.typing_goes_on(590.0)
    await bot.step(10.0)
    assert len(fake.created) == 2 and fake.created[1]["request"]["content"]
    before = bot.typed()
    await bot.step(30.0)
    assert bot.typed() == before
