"""A reply's re-delivery finds the part 0 it made of a draft older than the message it answers.

The shape: a draft reused across a supersede was posted before the burst's last message (the one
the reply answers). The outbox found the draft by its key (its post's outcome was unknown), edited
it into the reply's part 0 (relabelling its metadata with the reply's id) and died before marking
the reply sent. The draft's key no longer labels the message, and the message is older than the
one the reply answers, so a look-up for the reply's parts from that message would miss it and
post part 0 again. The fake gives every message, a person's or the bot's, Slack's ts order:
later messages have larger ts.
"""

from __future__ import annotations

import time
from dataclasses import replace

from bot.core.draft_lookup import DraftPosts, locate_draft
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.streaming import new_draft
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, FakeSlackApi
from tests.slack_harness import Bot, api, bot

__all__ = ["api", "bot"]  # fixtures

KEY = ConversationKey("slack", TEAM, "D1", "")
TTL = 30.0


def person_writes(api: FakeSlackApi, text: str) -> str:
    """A message of a person in the DM, with the ts Slack would give it now."""
    ts = api._next_ts()
    api.add_user_message(KEY.channel, ts, text)
    return f"{KEY.channel}:{ts}"


def parts_of(api: FakeSlackApi, reply_id: str) -> list[int]:
    """The part numbers of the messages labelled with this reply's id."""
    return [
        p.metadata["event_payload"]["part"]
        for p in api.posts()
        if p.metadata and p.metadata.get("event_payload", {}).get("reply_id") == reply_id
    ]


async def test_redelivery_finds_part_0_made_of_a_draft_older_than_the_answered_message(
    api: FakeSlackApi, bot: Bot
) -> None:
    drafts = bot.frontend.only.drafts
    first = person_writes(api, "tell me about")
    # the first generation's draft, posted before the burst's last message (then superseded)
    draft = new_draft(time.time(), first)  # the host's clock, as Slack's ts
    draft_message = await drafts.post_draft(KEY, draft, "Tell me about wh")
    last = person_writes(api, "whales")
    assert float(draft_message.split(":")[1]) < float(last.split(":")[1])  # Slack's ts order

    # the reply's row knows the draft's key, not its message (the post's response was lost)
    row_draft = Draft(draft.key, None, draft.created_at, draft.reply_to)
    reply = Reply("r1", KEY, "Whales are mammals.", 2, reply_to_message_id=last, draft=row_draft)
    now = FakeClock(draft.created_at + TTL + 1)  # past the settle time: a look-up is proof
    posts = DraftPosts()  # another process's: its own post is unknown here
    found = await locate_draft(drafts, KEY, row_draft, now, TTL, posts)  # as the outbox does
    assert found == draft_message
    posted = await bot.frontend.deliver(replace(reply, draft=replace(row_draft, message_id=found)))
    assert posted == [draft_message]
    assert parts_of(api, "r1") == [0]  # relabelled: the draft's key no longer names it
    assert await drafts.outbound.posted_parts(reply) == {}  # not from the answered message

    # the process dies here, before the reply is marked sent: its row still holds the draft
    # without a message id, and the next claim delivers it again
    found_again = await locate_draft(drafts, KEY, row_draft, now, TTL, posts)
    again = replace(reply, attempt=2, draft=replace(row_draft, message_id=found_again))
    posted_again = await bot.frontend.deliver(again)

    assert parts_of(api, "r1") == [0]
    assert posted_again == [draft_message]
    assert [p.text for p in api.posts()] == ["Whales are mammals."]
