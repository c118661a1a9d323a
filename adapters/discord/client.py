"""The Discord front end on discord.py: gateway events in, replies out (`posting`, `streaming`).

Discord never delivers an event again, so nothing received may be dropped: a message, edit or
delete the store refuses (busy) is tried again a few times with backoff; a message that still
fails is held in memory until the store answers (`unstored`), and past that queue's bound
catch-up (`history`) reads its conversation from just before the failure. An edit or delete that
still fails is logged as lost: history does not show them. The same event seen twice (a RESUME
replay, two processes on one shard) is one stored message: the engine dedupes by message id.
Catch-up also runs at start and after a reconnect that began a new session (READY again, not
RESUMED: a resumed session replays what it missed).

A gateway connection that ends for good (discord.py gave up reconnecting) is reported to the host
as a failure, so the process exits non-zero; startup problems a user must fix become one
`ConfigError` line. There is no `stop_intake`: an event refused at shutdown would be lost, while
one stored is answered after the restart or by another process; events are stored until `stop`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict

import discord

from adapters.discord import commands, files
from adapters.discord.approval_cards import NOT_RECORDED as CARD_NOT_RECORDED
from adapters.discord.approval_cards import approval_target, end_card, post_card
from adapters.discord.bad_events import guard_parsers
from adapters.discord.calls import call
from adapters.discord.feedback import answer_vote, pressed_vote, vote_button
from adapters.discord.history import History
from adapters.discord.indicator import TypingKeeper
from adapters.discord.posting import post_reply
from adapters.discord.render import allowed_mentions
from adapters.discord.routing import DM_WORKSPACE, PLATFORM, Routing, message_text
from adapters.discord.stop import NOT_RECORDED, answer_click, stop_target
from adapters.discord.streaming import MESSAGES, DiscordDrafts
from adapters.discord.unstored import UNSTORED_LIMIT, UnstoredMessages
from bot.config import DiscordConfig
from bot.core.backoff import Backoff
from bot.core.catch_up import CatchUp, CatchUpRun
from bot.core.clicks import Click, ClickKind
from bot.core.clock import Clock, SystemClock, first_of
from bot.core.errors import (
    BurstbotError,
    ConfigError,
    DeliveryError,
    RetryableDeliveryError,
    StoreError,
)
from bot.core.events import (
    Attachment,
    ConversationKey,
    Event,
    IncomingMessage,
    MessageDeleted,
    MessageEdited,
    Reply,
    ResetConversation,
)
from bot.core.frontend import CatchUpSource, Drafting, FileSource, Healthy, Host
from bot.core.pacing import Limit, Pacer
from bot.core.votes import VoteValue

log = logging.getLogger("burstbot.discord")

INTENT_HELP = (
    "discord: the bot's Message Content intent is disabled; enable it in the Developer Portal "
    "(your application → Bot → Privileged Gateway Intents → Message Content Intent)"
)
REMEMBERED_REPLIES = 1000
INGEST_ATTEMPTS = 4
INGEST_BACKOFF = Backoff(0.25, 4.0, factor=4.0)  # 0.25 s, 1 s, 4 s: about 5 s in all before
# catch-up takes over; no jitter: a few retries of one event, no crowd to spread out
_SHARD_CLOSE_CODES = {4010: "invalid shard", 4011: "sharding required"}
RawDelete = discord.RawMessageDeleteEvent | discord.RawBulkMessageDeleteEvent


def gateway_intents(typing: bool = True) -> discord.Intents:
    """Guilds (channels, threads), guild and DM messages, and their content; with `typing`, the
    (unprivileged) typing notices that keep a pending burst open. Nothing more."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    intents.typing = typing
    return intents


class DiscordFrontend(Healthy, Drafting, CatchUpSource, FileSource):
    platform = "discord"

    def __init__(
        self,
        config: DiscordConfig,
        token: str = "",
        clock: Clock | None = None,
        intents: discord.Intents | None = None,
        unstored_limit: int = UNSTORED_LIMIT,
    ) -> None:
        self.routing = Routing.from_config(config)
        self.allowed_mentions = allowed_mentions(config.mention_author)
        self.max_parts = config.max_parts_per_reply
        self.clock = clock or SystemClock()
        self.typing = TypingKeeper(self.clock)
        # burstbot never joins voice: skip discord.py's start-up warnings about voice libraries.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        self.client = discord.Client(
            intents=intents or gateway_intents(),
            shard_id=config.shard_id,
            shard_count=config.shard_count,
            allowed_mentions=self.allowed_mentions,
            # Long rate limits come back as RateLimited (→ retry later) instead of a long sleep.
            max_ratelimit_timeout=30.0,
        )
        for handler in (
            self.on_ready,
            self.on_disconnect,
            self.on_resumed,
            self.on_message,
            self.on_raw_message_edit,
            self.on_raw_typing,
            self.on_raw_message_delete,
            self.on_raw_bulk_message_delete,
            self.on_interaction,
        ):
            self.client.event(handler)  # discord.py calls the client's `on_<event>` attributes
        self.tree = commands.command_tree(self.client, self.on_reset)
        guard_parsers(self.client._connection.parsers)  # a bad event costs a line, not the process
        self.history = History(self.client, lambda: self.routing, self.incoming)
        self.host: Host | None = None
        self.unstored = UnstoredMessages(
            self._store_unstored, self.clock, self._left_to_catch_up, unstored_limit
        )
        self._catch_up: CatchUp | None = None
        self._lost_at: float | None = None  # when the gateway connection last dropped
        self._token = token
        self._ready = asyncio.Event()
        self._connection: asyncio.Task[None] | None = None
        self._stopping = False
        self._posted: OrderedDict[str, dict[int, str]] = OrderedDict()
        self.drafts = DiscordDrafts(
            self._channel,
            self._partial_channel,
            self.allowed_mentions,
            lambda: None if self.client.user is None else self.client.user.id,
            config.nonce_window_seconds,
            Pacer(self.clock, {MESSAGES: Limit(config.edits_per_minute)}),
        )

    # lifecycle -------------------------------------------------------------------------------
    def attach(self, host: Host) -> None:
        """Receive events for `host` (tests attach to a client driven by dpytest)."""
        self.host = host

    async def start(self, host: Host) -> None:
        """Log in, connect the gateway and return once READY; a failure closes the client."""
        self.attach(host)
        try:
            await self._connect()
        except BaseException:
            await self.client.close()
            raise

    async def _connect(self) -> None:
        try:
            await call(self.client.login(self._token))
        except discord.LoginFailure as exc:
            raise ConfigError(f"discord.token_env: Discord rejected the bot token ({exc})") from exc
        except DeliveryError as exc:
            raise BurstbotError(f"discord: cannot reach Discord to log in ({exc})") from exc
        self._connection = asyncio.create_task(self.client.connect(reconnect=True))
        await first_of(self._connection, self._ready.wait())
        if self._connection.done():
            raise _connect_error(self._connection)
        self._connection.add_done_callback(self._connection_ended)
        await commands.register_commands(self.client, self.tree)

    async def stop(self) -> None:
        self._stopping = True
        await self.unstored.stop()
        if self._catch_up is not None:
            await self._catch_up.stop()
        await self.typing.close()
        await self.client.close()
        if self._connection is not None:
            await asyncio.gather(self._connection, return_exceptions=True)

    def health(self) -> tuple[bool, str]:
        """`/healthz`: the gateway session is up (READY, not lost since, not closed)."""
        if self._ready.is_set() and self._lost_at is None and not self.client.is_closed():
            return True, "gateway connected"
        return False, "gateway reconnecting" if self._ready.is_set() else "gateway not connected"

    def _connection_ended(self, task: asyncio.Task[None]) -> None:
        """discord.py reconnects by itself; if the connection ends anyway, it ended for good."""
        if self._stopping or task.cancelled():
            return
        if self.host is not None:
            self.host.frontend_failed(self.platform, _connect_error(task))

    # in --------------------------------------------------------------------------------------
    async def on_ready(self) -> None:
        user, client = self.client.user, self.client
        shard = f" (shard {client.shard_id}/{client.shard_count})" if client.shard_count else ""
        log.info("discord: connected as %s%s in %d guild(s)", user, shard, len(client.guilds))
        if self._ready.is_set() and self._catch_up is not None:
            log.info("discord: a new gateway session; catching up")
            self._catch_up.request(self._lost_at or self.clock.now())
        self._lost_at = None
        self._ready.set()

    async def on_disconnect(self) -> None:
        if self._lost_at is None:
            self._lost_at = self.clock.now()

    async def on_resumed(self) -> None:
        self._lost_at = None  # Discord replays what the session missed

    def incoming(self, message: discord.Message) -> IncomingMessage | None:
        """A message that counts, as a neutral event (live or from history)."""
        me = self.client.user
        if me is None or not self.routing.counts(message, me.id):
            return None
        text, attached = message_text(message), files.attachments(message)
        if not text.strip() and not attached:
            return None
        return IncomingMessage(
            key=self.routing.key_of(message),
            message_id=str(message.id),
            author_id=str(message.author.id),
            author_name=message.author.display_name,
            text=text,
            is_dm=message.guild is None,
            attachments=attached,
        )

    async def on_message(self, message: discord.Message) -> None:
        event = self.incoming(message)
        if self.host is None or event is None:
            return
        if self.unstored.holding:  # behind the messages already waiting, in arrival order
            self.unstored.hold(event, self.clock.now())
            return
        failed_at = self.clock.now()
        if await self._store(event, f"message {event.message_id}") is not None:
            self.unstored.hold(event, failed_at)

    async def _store_unstored(self, event: IncomingMessage) -> None:
        if self.host is not None:
            await self.host.ingest(event)

    def _left_to_catch_up(self, event: IncomingMessage, failed_at: float) -> None:
        """The held queue is full: catch-up reads the conversation once the store answers."""
        if self._catch_up is None:
            log.error("discord: message %s in %s lost: not stored, too many held and catch-up "
                      "is off", event.message_id, event.key.id)  # fmt: skip
            return
        log.error("discord: message %s in %s not stored, too many held; catch-up will fetch it",
                  event.message_id, event.key.id)  # fmt: skip
        self._catch_up.request(failed_at, only=event.key)

    async def _store(self, event: Event, what: str) -> StoreError | None:
        """Ingest with backoff while the store refuses (busy); the last refusal, if all failed."""
        assert self.host is not None
        for attempt in range(1, INGEST_ATTEMPTS + 1):
            try:
                await self.host.ingest(event)
                return None
            except StoreError as exc:
                error = exc
            if attempt < INGEST_ATTEMPTS:
                delay = INGEST_BACKOFF.delay(attempt)
                log.warning("discord: cannot store %s (%s); trying again in %.2f s", what, error,
                            delay)  # fmt: skip
                await self.clock.sleep(delay)
        return error

    async def _store_change(self, change: MessageEdited | MessageDeleted, what: str) -> None:
        """History shows no edits or deletes: one never stored is lost, logged as such."""
        error = await self._store(change, what)
        if error is not None:
            log.error("discord: %s in %s lost: not stored (%s)", what, change.key.id, error)

    # catch-up ---------------------------------------------------------------------------------
    def use_catch_up(self, catch_up: CatchUp) -> None:
        self._catch_up = catch_up

    async def catch_up(self, run: CatchUpRun) -> None:
        await self.history.catch_up(run)

    async def on_reset(self, interaction: discord.Interaction) -> None:
        """`/reset`: clear the history of the conversation the person is in here, if allowed."""
        answer = await self._reset(interaction)
        try:
            await call(interaction.response.send_message(answer, ephemeral=True))
        except DeliveryError as exc:  # the person sees "did not respond"; the reset stands
            log.warning("discord: the /reset answer was not sent (%s)", exc)

    async def _reset(self, interaction: discord.Interaction) -> str:
        guild_id, channel_id = interaction.guild_id, interaction.channel_id
        user_id = interaction.user.id
        if self.host is None or channel_id is None or not self.routing.serves(guild_id):
            return commands.RESET_REFUSED
        key = self.routing.key(guild_id, channel_id, user_id)
        request = ResetConversation(key, author_id=str(user_id), is_dm=guild_id is None)
        try:
            result = await self.host.ingest(request)
        except Exception:  # the person gets a clear line instead of "did not respond"
            log.exception("discord: /reset of %s failed", key.id)
            return commands.RESET_FAILED
        return commands.RESET_DONE if result.status == "history" else commands.RESET_REFUSED

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A press of a draft's Stop button or of a card's Approve or Deny (slash commands go to
        the command tree): stored and decided by its interaction id before Discord is answered
        (stop.py, approval_cards.py); an answer's 👍/👎 likewise (feedback.py)."""
        if (voted := vote_button(interaction)) is not None:
            await self._vote(interaction, *voted)
            return
        channel_id, host = interaction.channel_id, self.host
        if host is None or channel_id is None:
            return
        stop, card = stop_target(interaction), approval_target(interaction)
        if stop is not None:
            kind: ClickKind = "stop"
            (target, thread), not_recorded = stop, NOT_RECORDED
        elif card is not None:
            (kind, target, thread), not_recorded = card, CARD_NOT_RECORDED
        else:
            return
        workspace = DM_WORKSPACE if interaction.guild_id is None else str(interaction.guild_id)
        key = ConversationKey(PLATFORM, workspace, str(channel_id), thread)
        user = interaction.user
        click = Click(str(interaction.id), key, kind, target, str(user.id), user.display_name)
        await answer_click(interaction, click, host.click, not_recorded)

    async def _vote(
        self, interaction: discord.Interaction, reply_id: str, value: VoteValue, thread: str
    ) -> None:
        channel_id = interaction.channel_id
        if self.host is None or channel_id is None:
            return
        workspace = DM_WORKSPACE if interaction.guild_id is None else str(interaction.guild_id)
        key = ConversationKey(PLATFORM, workspace, str(channel_id), thread)
        vote = pressed_vote(interaction, key, reply_id, value)
        await answer_vote(interaction, vote, self.host.vote)

    async def on_raw_typing(self, payload: discord.RawTypingEvent) -> None:
        """Someone started typing: a notice for the host, never stored (a failure is logged)."""
        me = self.client.user
        if self.host is None or me is None or payload.user_id == me.id:
            return
        if not self.routing.serves(payload.guild_id):
            return
        key = self.routing.key(payload.guild_id, payload.channel_id, payload.user_id)
        try:
            await self.host.typing(key, str(payload.user_id))
        except StoreError as exc:  # only a wait is lost: the burst is answered on time
            log.warning("discord: typing notice in %s not applied (%s)", key.id, exc)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        message, before = payload.message, payload.cached_message
        if self.host is None or message.author.bot or not self.routing.serves(payload.guild_id):
            return
        attached = files.attachments(message)
        now_shows = (message.content, attached)
        if before is not None and (before.content, files.attachments(before)) == now_shows:
            return  # an embed unfurl or a pin, not an edit (a file removed is one)
        if before is None and message.edited_at is None:
            return  # uncached and never edited: an embed update of an unedited message
        key = self.routing.key(payload.guild_id, payload.channel_id, message.author.id)
        edit = MessageEdited(key, str(message.id), message_text(message), attached)
        await self._store_change(edit, f"the edit of message {message.id}")

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        cached = [payload.cached_message] if payload.cached_message is not None else []
        await self._deleted(payload, {payload.message_id}, cached)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._deleted(payload, payload.message_ids, payload.cached_messages)

    async def _deleted(
        self, payload: RawDelete, message_ids: set[int], cached: list[discord.Message]
    ) -> None:
        if self.host is None or not self.routing.serves(payload.guild_id):
            return
        authors = {m.id: m.author.id for m in cached}
        for message_id in sorted(message_ids):
            key = self.routing.key(payload.guild_id, payload.channel_id, authors.get(message_id))
            delete = MessageDeleted(key, str(message_id))
            await self._store_change(delete, f"the delete of message {message_id}")

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        return await files.fetch(attachment, max_bytes)

    # out -------------------------------------------------------------------------------------
    async def deliver(self, reply: Reply) -> list[str]:
        if self.client.user is None:
            raise RetryableDeliveryError("discord: not logged in yet")
        posted = self._posted.get(reply.id)
        if posted is None:
            posted = dict(enumerate(reply.already_posted))
            self._posted[reply.id] = posted
            while len(self._posted) > REMEMBERED_REPLIES:
                self._posted.popitem(last=False)
        channel = self._channel(reply.key)
        first = None if reply.draft is None else functools.partial(self.drafts.finish, reply)
        mentions, turn = self.allowed_mentions, functools.partial(self.drafts.final_turn, reply.key)
        if reply.card is not None:  # an approval card: posted with Approve and Deny
            first = functools.partial(post_card, channel, mentions, reply)
        elif reply.ends_card is not None:  # its ending: the card edited, the buttons gone
            partial = self._partial_channel(reply.key)
            first = functools.partial(end_card, channel, partial, mentions, reply)
        return await post_reply(channel, reply, posted, mentions, self.max_parts, first, turn)

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        if not busy:
            self.typing.stop(key.id)
        elif self.client.user is not None:
            self.typing.start(key.id, lambda: self._channel(key), lambda: self._unsettled(key))

    async def _unsettled(self, key: ConversationKey) -> bool:
        return self.host is not None and not await self.host.is_settled(key)

    def _channel(self, key: ConversationKey) -> discord.abc.Messageable:
        """The cached channel, or a bare one by id (a DM after a restart, an uncached thread)."""
        cached = self.client.get_channel(int(key.channel))
        if isinstance(cached, discord.abc.Messageable):
            return cached
        return self._partial_channel(key)

    def _partial_channel(self, key: ConversationKey) -> discord.PartialMessageable:
        """A channel by id alone: enough to edit or delete a message in it."""
        guild_id = None if key.workspace == "dm" else int(key.workspace)
        return self.client.get_partial_messageable(int(key.channel), guild_id=guild_id)


def _connect_error(task: asyncio.Task[None]) -> BurstbotError:
    """One line for why the gateway connection ended."""
    exc = task.exception() if not task.cancelled() else None
    if exc is None:
        return BurstbotError("discord: the gateway connection closed")
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return ConfigError(INTENT_HELP)
    if isinstance(exc, discord.LoginFailure):
        return ConfigError(f"discord.token_env: Discord rejected the bot token ({exc})")
    if isinstance(exc, discord.ConnectionClosed) and exc.code in _SHARD_CLOSE_CODES:
        reason = _SHARD_CLOSE_CODES[exc.code]
        return ConfigError(f"discord.shard_id: Discord refused the shard settings ({reason})")
    if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
        return ConfigError("discord.token_env: Discord rejected the bot token (gateway 4004)")
    return BurstbotError(f"discord: the gateway connection ended ({exc!r})")
