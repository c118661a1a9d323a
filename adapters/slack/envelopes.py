"""A Socket Mode envelope that cannot be read costs one log line, not a traceback.

slack_sdk's Socket Mode client parses each frame and hands it to Bolt; a frame no Slack should
send (JSON that does not parse, an envelope without its id or payload, an event that is not an
object) survives there, but as a traceback from the SDK or from Bolt's listener for each frame.
`guard_envelopes` reads every frame first: one that is not a readable envelope is logged once,
with its type (never its content), and dropped without an ack, so Slack delivers it again if it
was real. Everything else goes to the SDK's listeners as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

log = logging.getLogger("burstbot.slack")

WITH_PAYLOAD = frozenset({"events_api", "slash_commands", "interactive"})


def unreadable(raw: object) -> tuple[str, str] | None:
    """Why a frame is not an envelope we can act on, as (its type, the reason); None if it is.
    Frames without an envelope id that the SDK handles itself (`hello`, `disconnect`) pass."""
    if not isinstance(raw, str):
        return "?", "not a text frame"
    try:
        message = json.loads(raw)
    except ValueError:
        return "?", "not JSON"
    if not isinstance(message, dict):
        return "?", f"JSON {type(message).__name__}, not an object"
    kind = message.get("type")
    if not isinstance(kind, str):
        return "?", "no type"
    if kind not in WITH_PAYLOAD:
        return None
    if not isinstance(message.get("envelope_id"), str) or not message["envelope_id"]:
        return kind, "no envelope_id"
    payload = message.get("payload")
    if not isinstance(payload, dict):
        return kind, "its payload is not an object"
    if kind == "events_api" and not isinstance(payload.get("event"), dict):
        return kind, "its event is not an object"
    return None


def guard_envelopes(client: Any) -> None:
    """Read each frame of slack_sdk's Socket Mode `client` before its listeners do."""
    running: set[asyncio.Future[None]] = set()  # each envelope's listeners, as the SDK runs them

    async def process_message() -> None:
        raw = await client.message_queue.get()
        if raw is None:
            return
        problem = unreadable(raw)
        if problem is not None:
            log.warning("slack: a Socket Mode %s envelope could not be read (%s); dropped",
                        *problem)  # fmt: skip
            return
        message: dict[str, Any] = json.loads(raw)
        listeners = asyncio.ensure_future(client.run_message_listeners(message, raw))
        running.add(listeners)
        listeners.add_done_callback(running.discard)

    client.process_message = process_message
