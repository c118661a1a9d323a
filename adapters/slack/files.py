"""Slack files: an event's `files` → neutral attachments, and their download with the bot token.

The bytes come from `url_private_download` with the bot token as a Bearer header (the app needs
the `files:read` scope). The token is sent only to Slack's file host, or to the host of a
configured `slack.api_base_url` (a test server): an event cannot make us hand it elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapters.download import download
from bot.core.errors import FetchError
from bot.core.events import Attachment

SLACK_FILE_HOSTS = frozenset({"files.slack.com"})


def attachments(message: Any) -> tuple[Attachment, ...]:
    """The files of a message payload (`files` was checked to be a list of objects)."""
    found: list[Attachment] = []
    for index, file in enumerate(message.get("files") or []):
        if file.get("mode") == "tombstone":  # deleted: Slack keeps only a placeholder
            continue
        # An id-less file (never seen in practice) is known by its message and place on it.
        file_id = str(file.get("id") or f"{message.get('ts')}#{index}").replace("/", "_")
        found.append(
            Attachment(
                platform_id=file_id,
                name=str(file.get("name") or file.get("title") or "file"),
                mime_type=str(file.get("mimetype") or ""),
                size=_count(file.get("size")),
                url=str(file.get("url_private_download") or file.get("url_private") or ""),
                width=_count(file.get("original_w")),
                height=_count(file.get("original_h")),
            )
        )
    return tuple(found)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


async def fetch(
    session: aiohttp.ClientSession,
    token: str,
    attachment: Attachment,
    max_bytes: int,
    trusted_hosts: Collection[str],
) -> bytes:
    host = urlsplit(attachment.url).hostname or ""
    if attachment.url and host not in trusted_hosts:
        raise FetchError(f"not a Slack file link ({host})", permanent=True)
    headers = {"Authorization": f"Bearer {token}"}
    html = attachment.mime_type.split(";")[0].strip().lower() == "text/html"
    return await download(session, attachment.url, max_bytes, headers, web_page_expected=html)
