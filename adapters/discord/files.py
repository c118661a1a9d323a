"""Discord attachments → neutral attachments, and their download from Discord's CDN.

CDN links are signed and expire (about a day), which is why the store keeps the bytes it fetched:
history shows a file again without a second download.
"""

from __future__ import annotations

import aiohttp
import discord

from adapters.download import download
from bot.core.events import Attachment


def attachments(message: discord.Message) -> tuple[Attachment, ...]:
    return tuple(
        Attachment(
            platform_id=str(a.id),
            name=a.filename,
            mime_type=a.content_type or "",
            size=a.size,
            url=a.url,
            width=a.width or 0,
            height=a.height or 0,
        )
        for a in message.attachments
    )


async def fetch(attachment: Attachment, max_bytes: int) -> bytes:
    async with aiohttp.ClientSession() as session:
        return await download(session, attachment.url, max_bytes)
