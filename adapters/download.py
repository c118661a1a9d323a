"""Downloading a platform's file over HTTP, shared by the front ends: never more than the limit
(the body is read in chunks and abandoned once over it), every failure one short `FetchError`."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from bot.core.errors import FetchError

DOWNLOAD_TIMEOUT_SECONDS = 60.0
CHUNK_BYTES = 64 * 1024


async def download(
    session: aiohttp.ClientSession,
    url: str,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    web_page_expected: bool = False,
) -> bytes:
    """The body of `url`. A web page where a file was expected is refused (Slack's sign-in page,
    sent when the token may not read files) unless the file is itself a web page."""
    if not url:
        raise FetchError("the platform gave no download link", permanent=True)
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_SECONDS)
    try:
        async with session.get(url, headers=headers, timeout=timeout) as response:
            if response.status != 200:
                raise _refused(response)
            if response.content_type == "text/html" and not web_page_expected:
                raise FetchError("got a web page instead of the file", permanent=True)
            if (response.content_length or 0) > max_bytes:
                raise FetchError("larger than the limit", permanent=True)
            body = bytearray()
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                body += chunk
                if len(body) > max_bytes:
                    raise FetchError("larger than the limit", permanent=True)
            return bytes(body)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise FetchError(f"download failed: {type(exc).__name__}") from exc


def _refused(response: aiohttp.ClientResponse) -> FetchError:
    """A status other than 200, as the platforms' calls map it: a 429 waits its Retry-After, a
    5xx or a 408 is tried again later, any other status can never work."""
    status = response.status
    if status == 429:
        try:
            retry_after: float | None = max(0.0, float(response.headers.get("Retry-After", "")))
        except ValueError:
            retry_after = None
        return FetchError(f"HTTP {status}: rate limited", retry_after=retry_after or 1.0)
    return FetchError(f"HTTP {status}", permanent=status < 500 and status != 408)
