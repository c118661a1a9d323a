"""Each setting's default is declared once, and config.example.toml documents it.

The core's settings (`bot/core/settings.py`) hold the defaults; the config model takes them from
there. Building the core's settings from an empty config must give the core's own defaults (so
the two can never disagree again), and the example file must list every key with the default the
model has.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from bot.config import ChannelConfig, ChannelToolsConfig, Config, ToolsConfig, parse_config
from bot.core.settings import CatchUpSettings, EngineSettings
from bot.wiring import catch_up_settings, engine_settings

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.toml"
EXAMPLE_TABLES = {"channels", "prices", "mcp"}
"""Lists of tables, empty by default, that the example shows commented out, as samples."""


def documented(model: dict[str, Any]) -> dict[str, Any]:
    """The model's defaults as the example writes them: no unset (None) keys, no sample tables."""
    return {
        key: documented(value) if isinstance(value, dict) else value
        for key, value in model.items()
        if value is not None and key not in EXAMPLE_TABLES
    }


def test_an_empty_config_gives_the_cores_own_defaults() -> None:
    config = parse_config({})
    core = EngineSettings()
    # `model` and `max_tokens` are None in the core (the replier's own): [llm]'s are the replier's
    expected = dataclasses.replace(core, model=config.llm.model, max_tokens=config.llm.max_tokens)
    assert engine_settings(config) == expected
    assert catch_up_settings(config) == CatchUpSettings()


def test_the_example_documents_every_key_with_its_default() -> None:
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert example == documented(Config().model_dump())
    assert parse_config(example) == Config()


def test_a_channel_overrides_the_cores_fields_by_their_names() -> None:
    """Every `[[channels]]` key is a core setting of the same name (`temperature` aside: refused),
    and a channel's tools table has the `[tools]` keys it overrides."""
    core = {field.name for field in dataclasses.fields(EngineSettings)}
    keys = set(ChannelConfig.model_fields) - {"platform", "channel", "temperature"}
    assert keys <= core
    assert {"quiet_seconds", "adaptive", "speculate", "streaming", "model", "tools"} <= keys
    tool_keys = set(ChannelToolsConfig.model_fields) - {"mcp"}
    assert tool_keys <= set(ToolsConfig.model_fields)
