"""Votes (`bot.core.votes`) over the shared SQL.

A vote is a click: its row in `clicks` is inserted and decided in one transaction. The insert
dedupes by the platform's click id (a second delivery decides nothing); the decision is one
conditional upsert of the (answer, voter) row in `votes`, which a newer press replaces and an
older one does not; the click's row keeps the outcome (`explain`)."""

from __future__ import annotations

from bot.core.votes import Vote, VoteOutcome, VoteRecord, reply_row_id
from storage.rows import from_row
from storage.seam import Conn, StoreSeam


class VoteSteps(StoreSeam[Conn]):
    async def vote(self, vote: Vote, now: float) -> VoteOutcome:
        click, row_id = vote.click, reply_row_id(vote.reply_id)
        params = {
            "click_id": click.click_id,
            "cid": click.key.id,
            "kind": click.kind,
            "target": click.target,
            "clicker_id": click.clicker_id,
            "clicker_name": click.clicker_name,
            "now": now,
            "reply_id": -1 if row_id is None else row_id,
            "value": vote.value,
            "pressed_at": vote.pressed_at,
        }
        outcome: VoteOutcome
        async with self._transaction(arrival=True) as db:
            if await self._one("insert_click", params, db) is None:
                return "duplicate"
            if await self._one("cast_vote", params, db) is not None:
                outcome = "voted"
            elif await self._one("votable_reply", params, db) is not None:
                outcome = "outdated"
            else:
                outcome = "not_votable"
            decision = {"click_id": click.click_id, "outcome": outcome, "version": None}
            await self._rows("decide_click", decision, db)
        return outcome

    async def votes(
        self, conversation_id: str | None = None, since: float = 0.0
    ) -> list[VoteRecord]:
        rows = await self._rows("votes", {"cid": conversation_id, "since": since})
        return [from_row(VoteRecord, r, reply_id=int(r["reply_id"])) for r in rows]

    async def vote_totals(self) -> dict[tuple[str, str], int]:
        """(model, value) → votes as they stand (the metrics' gauge)."""
        rows = await self._rows("vote_totals", {})
        return {(str(r["model"]), str(r["value"])): int(r["votes"]) for r in rows}
