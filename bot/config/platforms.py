"""The front ends' sections (`[slack]`, `[slack.assistant]`, `[discord]`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bot.config.sections import Section

MAX_PARTS_PER_REPLY = 10
"""Posts one reply may become: 35,000 characters on Slack, 20,000 on Discord (about 9,000 and
5,000 tokens, several times the default `llm.max_tokens`); the rest is cut with a note."""
MAX_SUGGESTED_PROMPTS = 4  # Slack's limit for one assistant thread
MAX_PROMPT_TITLE_CHARS = 100
MAX_PROMPT_MESSAGE_CHARS = 4_000
MAX_GREETING_CHARS = 4_000


class SuggestedPrompt(Section):
    """One button of an assistant thread: `title` shows, `message` is sent as the person's."""

    title: str = Field(min_length=1, max_length=MAX_PROMPT_TITLE_CHARS)
    message: str = Field(min_length=1, max_length=MAX_PROMPT_MESSAGE_CHARS)


class SlackAssistantConfig(Section):
    """Slack's AI surfaces (the agent view, assistant threads): `[slack.assistant]`. Live on
    reload."""

    enabled: bool = True
    suggested_prompts: list[SuggestedPrompt] = Field(
        default_factory=list, max_length=MAX_SUGGESTED_PROMPTS
    )
    channel_prompts: dict[str, list[SuggestedPrompt]] = Field(default_factory=dict)
    prompts_title: str = Field(default="", max_length=MAX_PROMPT_TITLE_CHARS)
    greeting: str = Field(default="", max_length=MAX_GREETING_CHARS)
    set_title: Literal["first_message", "answer", "off"] = "first_message"
    channel_context: bool = False
    channel_context_messages: int = Field(default=20, ge=1, le=200)

    @field_validator("channel_prompts")
    @classmethod
    def _at_most_four(
        cls, prompts: dict[str, list[SuggestedPrompt]]
    ) -> dict[str, list[SuggestedPrompt]]:
        for channel, listed in prompts.items():
            if len(listed) > MAX_SUGGESTED_PROMPTS:
                raise ValueError(
                    f"{channel}: at most {MAX_SUGGESTED_PROMPTS} prompts (Slack shows no more)"
                )
        return prompts


class SlackConfig(Section):
    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    # one workspace with `bot_token_env`, or any number installed through "Add to Slack"
    # (adapters/slack/install.py, docs/slack.md "Distributing to several workspaces")
    install: Literal["token", "oauth"] = "token"
    client_id_env: str = "SLACK_CLIENT_ID"
    client_secret_env: str = "SLACK_CLIENT_SECRET"
    state_secret_env: str = "SLACK_STATE_SECRET"
    token_key_env: str = "BURSTBOT_TOKEN_KEY"  # Fernet keys, newest first, comma-separated
    redirect_url: str = ""  # the public URL of `redirect_path`, when the app lists several
    install_path: str = "/slack/install"
    redirect_path: str = "/slack/oauth_redirect"
    forget_on_uninstall: bool = True
    api_base_url: str = ""
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=0, le=65535)
    http_path: str = "/slack/events"
    http_reuse_port: bool = False
    listen_channels: list[str] = Field(default_factory=list)
    # Slack's AI surface the app's manifest declares (docs/slack-assistant.md): "agent"
    # (`agent_view`, as the shipped manifest), "assistant" (`assistant_view`), "plain" (DMs and
    # mentions only). An app that runs the other one is served anyway, with one log line; a DM
    # is threaded only once Slack showed it as an agent's Messages tab, so an older app whose
    # config does not say keeps its plain DMs.
    surface: Literal["agent", "assistant", "plain"] = "agent"
    thinking_indicator: Literal["auto", "reaction", "off"] = "auto"
    thinking_reaction: str = Field(default="hourglass_flowing_sand", min_length=1)
    max_parts_per_reply: int = Field(default=MAX_PARTS_PER_REPLY, ge=1, le=100)
    assistant: SlackAssistantConfig = Field(default_factory=SlackAssistantConfig)
    # the platform's limits, shared by every conversation streaming at once (0: not paced)
    updates_per_minute: float = Field(default=50.0, ge=0, le=100_000)  # chat.update, workspace
    posts_per_minute: float = Field(default=60.0, ge=0, le=100_000)  # chat.postMessage, channel
    # native streams (assistant threads): how the model's steps show, and how long a stream may
    # run before burstbot stops it and goes on by updating the message (Slack ends a stream
    # about five minutes after its start)
    task_display: Literal["timeline", "plan"] = "timeline"
    stream_max_seconds: float = Field(default=240.0, gt=0, le=290)


class DiscordConfig(Section):
    enabled: bool = False
    token_env: str = "DISCORD_TOKEN"
    listen_channels: list[str] = Field(default_factory=list)
    allowed_guilds: list[str] = Field(default_factory=list)
    scope: Literal["channel", "user"] = "channel"
    allow_dms: bool = True
    mention_author: bool = True
    max_parts_per_reply: int = Field(default=MAX_PARTS_PER_REPLY, ge=1, le=100)
    shard_id: int | None = Field(default=None, ge=0, le=100_000)
    shard_count: int | None = Field(default=None, ge=1, le=100_000)
    nonce_window_seconds: float = Field(default=120.0, ge=0, le=600)
    # message posts and edits per channel, shared by every conversation streaming there (0: not
    # paced); Discord allows about five per five seconds
    edits_per_minute: float = Field(default=60.0, ge=0, le=100_000)

    @model_validator(mode="after")
    def _shard_pair(self) -> DiscordConfig:
        if (self.shard_id is None) != (self.shard_count is None):
            raise ValueError("shard_id and shard_count must be set together")
        if self.shard_count is not None and (self.shard_id or 0) >= self.shard_count:
            raise ValueError("shard_id must be less than shard_count")
        return self
