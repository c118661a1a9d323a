"""Front-end (and replier) abilities are declared and checked once, at wiring: a misspelt method
or a missing declaration fails the start with one line instead of turning a feature off."""

from __future__ import annotations

import pytest

from adapters.console import ConsoleFrontend
from adapters.discord.client import DiscordFrontend
from adapters.slack.app import SlackFrontend
from bot.config import DiscordConfig, SlackConfig
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey
from bot.core.frontend import (
    Healthy,
    PacedDrafts,
    StopsIntake,
    declares,
    drafts_of,
    frontend_health,
)
from bot.core.replier import Closable, GenerationProgress, Prompt
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app


class MisspeltStop(RecordingFrontend, StopsIntake):
    async def stop_intkae(self) -> None: ...


class UndeclaredHealth(RecordingFrontend):
    def health(self) -> tuple[bool, str]:
        return False, "down"


class DeclaredHealth(RecordingFrontend, Healthy):
    def health(self) -> tuple[bool, str]:
        return False, "down"


class UnpacedSurface(RecordingFrontend, PacedDrafts):
    """Declares pacing, but its method is misspelt."""

    async def draft_trun(self, key: ConversationKey, posting: bool) -> None: ...


class UnclosedReplier(ScriptedReplier, Closable):
    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        return "never"


async def test_a_misspelt_ability_method_fails_the_start_with_one_line(
    store: SqliteStore, clock: FakeClock
) -> None:
    with pytest.raises(ConfigError) as raised:
        make_app(store, clock, ScriptedReplier(), MisspeltStop())
    assert str(raised.value) == (
        "test front end: MisspeltStop declares StopsIntake but has no stop_intake"
    )


async def test_an_ability_implemented_but_not_declared_fails_the_start(
    store: SqliteStore, clock: FakeClock
) -> None:
    with pytest.raises(ConfigError, match="UndeclaredHealth has health but does not declare"):
        make_app(store, clock, ScriptedReplier(), UndeclaredHealth())
    declared = DeclaredHealth()
    make_app(store, clock, ScriptedReplier(), declared)
    assert frontend_health(declared) == (False, "down")
    assert frontend_health(RecordingFrontend()) == (True, "running")


async def test_a_replier_that_declares_closing_must_close(
    store: SqliteStore, clock: FakeClock
) -> None:
    with pytest.raises(ConfigError, match="replier: UnclosedReplier declares Closable but has no"):
        make_app(store, clock, UnclosedReplier(), RecordingFrontend())  # type: ignore[abstract]


def test_a_draft_surface_that_declares_pacing_must_pace() -> None:
    surface = UnpacedSurface(drafts=True)
    with pytest.raises(ConfigError, match="test drafts: UnpacedSurface declares PacedDrafts"):
        drafts_of(surface)


def test_the_real_front_ends_declare_what_they_have() -> None:
    from bot.app import check_wiring

    fronts = [
        ConsoleFrontend(),
        SlackFrontend(SlackConfig(enabled=True), "xoxb-test"),
        DiscordFrontend(DiscordConfig(enabled=True), "token"),
    ]
    check_wiring(fronts, ScriptedReplier())  # type: ignore[arg-type]
    assert [type(f).__name__ for f in fronts if declares(f, Healthy)] == [
        "SlackFrontend", "DiscordFrontend"
    ]  # fmt: skip
