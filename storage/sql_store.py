"""One SQL store: the storage side of the pipeline, every step written once.

`SqlStore` runs named statements (`sql_store.sql`, shared by both dialects, plus the backend's own
`sqlite.sql` or `postgres.sql`) through a small seam that each backend fills in:

- `_transaction()`: one transaction on one connection. SQLite opens it with `BEGIN IMMEDIATE` (a
  deferred one fails with SQLITE_BUSY instead of waiting); PostgreSQL runs it at READ COMMITTED,
  where the first statement that touches the conversation locks its row;
- `_rows(name, params, db)`: one statement, inside `db`'s transaction or on its own;
- `_array` / `_strings`: how a list of strings travels (JSON text in SQLite, an array in PG);
- `_hint(db, payload)`: a wake-up hint for other processes, sent when `db` commits;
- `_schema_in_use(db)` / `_migrate_to(db, number, script)`: the migrations' bookkeeping.
Rules every step keeps:

- every compare-and-swap is one conditional statement (`UPDATE ... WHERE ... RETURNING`) and the
  step reads the returned rows, never a row count;
- a step that reads and then writes runs in one `_transaction()`; a lone statement runs alone;
- `lease_token` only ever increases: renew, release, commit and failure are conditional on it;
- a transaction that changes a conversation locks its row first, before its timer or outbox;
- protocol times are the database's (`:db_now`), and cross to and from the caller's clock by
  their distance from the caller's `now` (`:skew`; see sql_store.sql and bot/core/store.py).
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import ClassVar, Literal

from bot.core import store as contract
from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Draft, IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import ConversationSummary, IngestResult, OutboxRow, Timing
from bot.core.trace_context import new_trace_context
from storage import rhythm
from storage import rows as codec
from storage.actions import ActionSteps
from storage.api_limits import ApiLimitSteps
from storage.approvals import ApprovalSteps
from storage.clicks import ClickSteps
from storage.installations import InstallationSteps
from storage.processes import ProcessSteps
from storage.requeue import RequeueSteps
from storage.retention import RetentionSteps
from storage.rows import Params, Row
from storage.seam import Conn
from storage.shares import ShareSteps
from storage.votes import VoteSteps


class SqlStore(
    RetentionSteps[Conn],
    RequeueSteps[Conn],
    ActionSteps[Conn],
    ClickSteps[Conn],
    VoteSteps[Conn],
    ApprovalSteps[Conn],
    InstallationSteps[Conn],
    ApiLimitSteps[Conn],
    ProcessSteps[Conn],
    ShareSteps[Conn],
):
    MIGRATIONS: ClassVar[Sequence[str]]

    # the rest of the seam (see the module docstring) ----------------------------------------
    @abstractmethod
    async def open(self) -> None:
        """Connect and run pending migrations."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def _schema_in_use(self, db: Conn) -> int: ...

    @abstractmethod
    async def _migrate_to(self, db: Conn, number: int, script: str) -> None: ...

    # plumbing --------------------------------------------------------------------------------
    async def _value(self, name: str, params: Params) -> float | None:
        row = await self._one(name, params)
        return None if row is None or row[0] is None else float(row[0])

    async def _migrate(self) -> None:
        async with self._transaction() as db:
            current = await self._schema_in_use(db)
            if current > len(self.MIGRATIONS):
                raise StoreError(
                    f"database schema version {current} is newer than this burstbot "
                    f"({len(self.MIGRATIONS)}); upgrade burstbot"
                )
            for number, script in enumerate(self.MIGRATIONS[current:], start=current + 1):
                await self._migrate_to(db, number, script)

    @property
    def schema_version(self) -> int:
        """The migration this burstbot brings the database to."""
        return len(self.MIGRATIONS)

    # 1. arrival ------------------------------------------------------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        """Bump first, then insert with seq = the new version (the bump's row lock orders
        concurrent arrivals); a duplicate id rolls back to the savepoint and changes nothing."""
        cid = message.key.id
        params = codec.message_params(message, now)
        async with self._transaction(arrival=True) as db:
            await self._rows("ensure_conversation", params, db)
            await self._rows("ingest_savepoint", {}, db)
            fresh = new_trace_context()
            bumped = await self._one("bump_version", {**params, "trace_context": fresh}, db)
            assert bumped is not None
            version = int(bumped[0])
            if await self._one("insert_message", {**params, "seq": version}, db) is None:
                await self._rows("undo_ingest", {}, db)
                return IngestResult("duplicate", cid, version - 1)
            armed = await self._arm(db, cid, version, now, timing, message.author_id)
        return replace(armed, trace_context=bumped[1], opened=bumped[1] == fresh)

    async def _arm(
        self, db: Conn, cid: str, version: int, now: float, timing: Timing, author_id: str | None
    ) -> IngestResult:
        """The adaptive window first learns the new message's author (`author_id`; None: an edit
        or delete re-arms, and every author's window counts from now), then chooses the window."""
        if timing.adaptive is not None:
            run, key = functools.partial(self._rows, db=db), ConversationKey.parse(cid)
            if author_id is not None:
                await rhythm.learn(run, key, author_id, version, now)
            changed = author_id is None
            window = await rhythm.choose_window(run, key, version, now, timing.adaptive, changed)
            timing = replace(timing, quiet_seconds=window.seconds)
        arm = {"cid": cid, "now": now, "version": version, "max_wait": timing.max_wait_seconds}
        arm.update(quiet=timing.quiet_seconds, speculate_after=timing.speculate_after_seconds)
        armed = await self._one("arm_timer", arm, db)
        due_at = float(armed[0]) if armed else None
        start_at = float(armed[1]) if armed and armed[1] is not None else None
        await self._hint(db, f"timer {due_at if start_at is None else start_at}")
        return IngestResult("accepted", cid, version, due_at, start_at)

    async def _change(
        self, event: MessageEdited | MessageDeleted, now: float, timing: Timing
    ) -> IngestResult:
        """An edit or a delete. A pending message's change is new input (bump, re-arm); an
        answered one's is history."""
        uid = codec.message_uid(event.key.platform, event.key.workspace, event.message_id)
        async with self._transaction(arrival=True) as db:
            found = await self._one("find_message", {"uid": uid}, db)
            if found is None:
                return IngestResult("unknown", "", 0)
            cid = str(found["conversation_id"])
            edit = codec.edit_params(event) if isinstance(event, MessageEdited) else codec.DELETED
            changed = await self._one("change_message", {**edit, "uid": uid, "now": now}, db)
            pending = int(found["seq"]) > int(found["answered_version"])
            if changed is None or not pending:
                version = await self._one("current_version", {"cid": cid}, db)
                status: Literal["history", "duplicate"] = "history" if changed else "duplicate"
                return IngestResult(status, cid, int(version[0]) if version else 0)
            fresh = new_trace_context()
            bumped = await self._one("bump_version", {"cid": cid, "trace_context": fresh}, db)
            assert bumped is not None
            armed = await self._arm(db, cid, int(bumped[0]), now, timing, None)
        return replace(armed, trace_context=bumped[1], opened=bumped[1] == fresh)

    edit = delete = _change

    async def flush(self, conversation_id: str, now: float) -> None:
        await self._rows("flush_timer", {"cid": conversation_id, "now": now})

    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        """A typing notice (`bot/core/typing_window.py`): one conditional UPDATE of an armed timer
        (see `extend_quiet_for_typing`). A notice is an arrival: it keeps its place among the
        messages around it, so a notice from before a message never stretches that message's
        window."""
        params = {"cid": conversation_id, "author": author_id, "until": until, "now": now}
        async with self._transaction(arrival=True) as db:
            rows = await self._rows("extend_quiet_for_typing", params, db)
        return float(rows[0][0]) if rows else None

    # 2. timers and leases --------------------------------------------------------------------
    async def next_due_at(self, now: float, skip: Sequence[str] = ()) -> float | None:
        rows = await self._rows("earliest_timers", {"limit": len(skip) + 1, "now": now})
        return min((float(r[1]) for r in rows if r[0] not in skip), default=None)

    async def due_timers(self, now: float, limit: int) -> list[contract.DueTimer]:
        """Closed windows first, then early starts (which never take a closed one's slot)."""
        rows = await self._rows("due_timers", {"now": now, "limit": limit})
        if len(rows) < limit:
            more = {"now": now, "limit": limit - len(rows)}
            rows = [*rows, *await self._rows("speculative_timers", more)]
        return [contract.DueTimer(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def postpone_timer(self, conversation_id: str, due_at: float, now: float) -> None:
        await self._rows("postpone_timer", {"cid": conversation_id, "due_at": due_at, "now": now})

    async def acquire_lease(
        self, conversation_id: str, owner: str, now: float, ttl: float
    ) -> contract.Lease | None:
        params = {"cid": conversation_id, "owner": owner, "now": now, "ttl": ttl, "takeover": False}
        async with self._transaction() as db:
            row = await self._one("acquire_lease", params, db)
            taken_over = row is None
            if taken_over:
                row = await self._one("acquire_lease", {**params, "takeover": True}, db)
            if row is None:
                return None
            timer = await self._hold(db, conversation_id, row, int(row["version"]), now)
        deadline, closes = (timer[0], timer[1]) if timer else (None, 0.0)
        return codec.from_row(
            contract.Lease, row, deadline_at=deadline, closes_at=closes, taken_over=taken_over
        )

    async def _hold(self, db: Conn, cid: str, lease: Row, version: int, now: float) -> Row | None:
        hold = {"cid": cid, "expires_at": lease["lease_expires_at"], "version": version, "now": now}
        return await self._one("hold_timer", hold, db)

    async def lease_expiry(self, conversation_id: str, now: float) -> float | None:
        return await self._value("lease_expiry", {"cid": conversation_id, "now": now})

    async def renew_lease(
        self, conversation_id: str, token: int, version: int, now: float, ttl: float
    ) -> float | None:
        params = {"cid": conversation_id, "token": token, "now": now, "ttl": ttl}
        async with self._transaction() as db:
            row = await self._one("renew_lease", params, db)
            if row is not None:
                await self._hold(db, conversation_id, row, version, now)
        return None if row is None else float(row["expires_here"])

    async def window_closes_at(self, conversation_id: str, now: float) -> float | None:
        return await self._value("window_closes_at", {"cid": conversation_id, "now": now})

    async def release_lease(self, conversation_id: str, token: int) -> None:
        params = {"cid": conversation_id, "token": token}
        async with self._transaction() as db:
            if await self._one("release_lease", params, db) is not None:
                await self._rows("restore_timer", {"cids": self._array([conversation_id])}, db)

    async def drop_timer(self, conversation_id: str, version: int) -> None:
        await self._rows("drop_timer", {"cid": conversation_id, "version": version})

    async def release_owner(self, owner: str) -> int:
        async with self._transaction() as db:
            released = await self._rows("release_owner_leases", {"owner": owner}, db)
            cids = self._array([str(r[0]) for r in released])
            await self._rows("restore_timer", {"cids": cids}, db)
            await self._rows("release_owner_claims", {"owner": owner}, db)
            await self._hint(db, "released")
        return len(released)

    # 3. collect ------------------------------------------------------------------------------
    async def current_version(self, conversation_id: str) -> int:
        row = await self._one("current_version", {"cid": conversation_id})
        return int(row[0]) if row else 0

    async def pending_messages(
        self, conversation_id: str, after_version: int, upto_version: int
    ) -> list[contract.StoredMessage]:
        params = {"cid": conversation_id, "after": after_version, "upto": upto_version}
        return [codec.message_from_row(r) for r in await self._rows("pending_messages", params)]

    async def history(
        self, conversation_id: str, upto_version: int, limit: int
    ) -> list[contract.HistoryItem]:
        params = {"cid": conversation_id, "upto": upto_version, "limit": limit}
        rows = await self._rows("history", params)
        return [codec.history_from_row(r) for r in reversed(rows)]

    # 5. final check + commit -----------------------------------------------------------------
    async def commit(
        self,
        conversation_id: str,
        check: contract.FinalCheck,
        now: float,
        timing: Timing,
        reply: contract.NewReply | None,
        generation: contract.GenerationRecord | None = None,
        claim: contract.ClaimRequest | None = None,
    ) -> contract.CommitOutcome:
        cid, version = conversation_id, check.version
        async with self._transaction() as db:
            before = await self._one("lock_answered_version", {"cid": cid}, db)
            params = {"cid": cid, "next_trace": new_trace_context(), **asdict(check)}
            checked = await self._one("final_check", params, db)
            if checked is None or before is None:
                return contract.Discarded()
            row: OutboxRow | None = None
            if reply is not None:
                params = codec.reply_params(
                    cid, reply, int(before[0]), version, int(checked[0]), now
                )
                row = await self._insert_reply(db, params)
                await self._hint(db, f"outbox {row.platform}")
            cap = {"cid": cid, "version": version, "now": now, "max_wait": timing.max_wait_seconds}
            await self._rows("drop_timer", cap, db)
            await self._rows("restart_cap", cap, db)
            if generation is not None:
                await self._rows("record_generation", codec.generation_params(generation), db)
            if row is None or claim is None or row.platform not in claim.platforms:
                return contract.Committed(row)
            params = {"owner": claim.owner, "now": now, "ttl": claim.ttl, "reply_id": row.id}
            claimed = await self._one("claim_new_reply", params, db)
        if claimed is None:  # an earlier reply of the conversation is still pending
            return contract.Committed(row)
        return contract.Committed(self._claimed(claimed), claimed=True)

    async def record_failure(
        self, conversation_id: str, token: int, retry_at: float, now: float
    ) -> int | None:
        async with self._transaction() as db:
            row = await self._one("count_failure", {"cid": conversation_id, "token": token}, db)
            if row is None:
                return None
            rearm = {"cid": conversation_id, "retry_at": retry_at, "now": now}
            await self._rows("rearm_after_failure", rearm, db)
        return int(row[0])

    async def record_generation(self, record: contract.GenerationRecord) -> None:
        await self._rows("record_generation", codec.generation_params(record))

    # 6. deliver ------------------------------------------------------------------------------
    async def queue_notice(
        self, conversation_id: str, text: str, reply_to_message_id: str, now: float
    ) -> OutboxRow:
        """A notice outside any burst: an outbox row of kind `notice` that covers no message. Its
        versions are the negative `notice_slot` of the message it answers, so the outbox's key
        (conversation, covers_to_version) holds, no message counts as covered and history leaves
        it out. It never takes over the conversation's draft (that belongs to the pending
        burst)."""
        slot = contract.notice_slot(reply_to_message_id)
        notice = contract.NewReply(text, "notice", reply_to_message_id, covers_from_version=slot)
        params = codec.reply_params(conversation_id, notice, slot, slot, slot, now)
        async with self._transaction() as db:
            ensure = {"cid": conversation_id, "platform": params["platform"], "now": now}
            await self._rows("ensure_conversation", ensure, db)
            row = await self._one("insert_reply", params, db)
            assert row is not None
            await self._hint(db, f"outbox {params['platform']}")
        return self._outbox(row)

    async def claim_replies(
        self,
        owner: str,
        now: float,
        ttl: float,
        platforms: Sequence[str],
        limit: int,
        reply_id: int | None = None,
    ) -> list[OutboxRow]:
        params = {"owner": owner, "now": now, "ttl": ttl, "limit": limit, "reply_id": reply_id}
        rows = await self._rows("claim_replies", {**params, "platforms": self._array(platforms)})
        return sorted((self._claimed(r) for r in rows), key=lambda r: r.id)

    def _claimed(self, r: Row) -> OutboxRow:
        """A row a claim returned: its expiry on the claimer's clock (`claim_expires_here`)."""
        return replace(self._outbox(r), claim_expires_at=float(r["claim_expires_here"]))

    async def next_outbox_at(self, platforms: Sequence[str], now: float) -> float | None:
        params = {"platforms": self._array(platforms), "now": now}
        return await self._value("next_outbox_at", params)

    async def renew_claim(
        self, reply_id: int, claim_token: int, now: float, ttl: float
    ) -> float | None:
        params = {"id": reply_id, "claim": claim_token, "now": now, "ttl": ttl}
        return await self._value("renew_claim", params)

    async def record_parts(self, reply_id: int, claim_token: int, ids: Sequence[str]) -> bool:
        params = {"id": reply_id, "claim": claim_token, "ids": self._array(ids)}
        return await self._one("record_parts", params) is not None

    async def mark_sent(
        self, reply_id: int, claim_token: int, platform_message_ids: Sequence[str], now: float
    ) -> contract.Sent | None:
        ids = self._array(platform_message_ids)
        params = {"id": reply_id, "claim": claim_token, "ids": ids, "now": now}
        async with self._transaction() as db:
            if await self._one("mark_sent", params, db) is None:
                return None
            indicator = await self._one("take_indicator_of_reply", {"id": reply_id}, db)
        return contract.Sent(None if indicator is None else str(indicator[0]))

    # streaming: a conversation holds at most one draft; every change to it is fenced by the
    # lease token, and the commit that inserts a reply hands the draft over to it ----------------
    async def draft(self, conversation_id: str) -> Draft | None:
        row = await self._one("draft", {"cid": conversation_id})
        return None if row is None else Draft(str(row[0]), row[1], row[2] or 0.0, row[3])

    async def record_draft(self, conversation_id: str, token: int, draft: Draft) -> bool:
        params = {"cid": conversation_id, "token": token, **asdict(draft)}
        return await self._one("record_draft", params) is not None

    async def drop_draft(self, conversation_id: str, token: int, key: str) -> bool:
        params = {"cid": conversation_id, "token": token, "key": key}
        return await self._one("drop_draft", params) is not None

    async def _insert_reply(self, db: Conn, params: Params) -> OutboxRow:
        """In the commit's transaction: the new reply takes over the conversation's draft."""
        inserted = await self._one("insert_reply", params, db)
        assert inserted is not None
        cid = params["cid"]
        handed = await self._one("hand_draft_to_reply", {"cid": cid, "id": inserted["id"]}, db)
        await self._one("clear_draft", {"cid": cid}, db)
        assert handed is not None
        return self._outbox(handed)

    # the thinking indicator ------------------------------------------------------------------
    async def record_indicator(self, conversation_id: str, at: str, version: int) -> bool:
        params = {"cid": conversation_id, "at": at, "version": version}
        return await self._one("record_indicator", params) is not None

    async def take_indicator(self, conversation_id: str) -> str | None:
        row = await self._one("take_indicator", {"cid": conversation_id})
        return None if row is None else str(row[0])

    async def mark_retry(
        self,
        reply_id: int,
        claim_token: int,
        next_attempt_at: float,
        error: str,
        now: float,
        counts: bool = True,
    ) -> bool:
        params = {"id": reply_id, "claim": claim_token, "at": next_attempt_at, "error": error}
        return await self._one("mark_retry", {**params, "now": now, "counts": counts}) is not None

    async def mark_failed(self, reply_id: int, claim_token: int, error: str) -> bool:
        params = {"id": reply_id, "claim": claim_token, "error": error}
        return await self._one("mark_failed", params) is not None

    # /reset ----------------------------------------------------------------------------------
    async def reset_history(self, conversation_id: str) -> int | None:
        """Raise the history floor to the current version, so later prompts leave out every
        earlier turn (messages stay stored). Returns the floor, None if no such conversation."""
        rows = await self._rows("reset_history", {"cid": conversation_id})
        return int(rows[0][0]) if rows else None

    # what front ends remember (bot.core.catch_up) -------------------------------------------
    async def thread_status(self, conversation_id: str) -> bool | None:
        row = await self._one("thread_status", {"cid": conversation_id})
        return None if row is None or row[0] is None else bool(row[0])

    async def remember_thread(self, conversation_id: str, ours: bool, now: float) -> None:
        await self._rows("remember_thread", {"cid": conversation_id, "ours": ours, "now": now})

    async def hold(self, message: IncomingMessage, now: float) -> None:
        await self._rows("hold_message", codec.message_params(message, now))

    async def held(self, platform: str, limit: int) -> list[IncomingMessage]:
        rows = await self._rows("held_messages", {"platform": platform, "limit": limit})
        return [codec.held_from_row(r) for r in rows]

    async def unhold(self, message: IncomingMessage) -> None:
        await self._rows("unhold_message", codec.message_params(message, 0.0))

    async def catch_up_points(
        self, platform: str, before: float, now: float
    ) -> dict[str, str | None]:
        params = {"platform": platform, "before": before, "now": now}
        return {str(r[0]): r[1] for r in await self._rows("catch_up_points", params)}

    async def stored_in(self, platform: str, workspace: str, message_id: str) -> str | None:
        row = await self._one(
            "stored_in", {"uid": codec.message_uid(platform, workspace, message_id)}
        )
        return None if row is None else str(row[0])

    # fetched files (bot.core.attachments): what each file's one fetch gave, and its bytes, kept
    # once per SHA-256 however many messages share them ------------------------------------------
    async def attachment_file(self, uid: str) -> contract.StoredFile | None:
        row = await self._one("attachment_file", {"uid": uid})
        if row is None:
            return None
        content = None if row["content"] is None else bytes(row["content"])
        return contract.StoredFile(row["sha256"], row["note"], content)

    async def keep_attachment_file(self, uid: str, file: contract.StoredFile, now: float) -> None:
        """One transaction: the bytes (unless that hash is kept already), then the outcome."""
        async with self._transaction() as db:
            if file.sha256 is not None and file.content is not None:
                blob = {"sha256": file.sha256, "content": file.content, "now": now}
                await self._rows("keep_attachment_blob", blob, db)
            outcome = {"uid": uid, "sha256": file.sha256, "note": file.note, "now": now}
            await self._rows("keep_attachment_file", outcome, db)

    # what front ends note about a conversation (bot.core.notes.NoteBook): one named value per
    # conversation, kept apart from the conversation row, since it may be written before the
    # conversation has a message (Slack's assistant thread opens empty) -----------------------
    async def note(self, conversation_id: str, name: str) -> str | None:
        row = await self._one("note", {"cid": conversation_id, "name": name})
        return None if row is None else str(row[0])

    async def put_note(self, conversation_id: str, name: str, value: str, now: float) -> None:
        params = {"cid": conversation_id, "name": name, "value": value, "now": now}
        await self._rows("put_note", {**params, "replace": True})

    async def add_note(self, conversation_id: str, name: str, value: str, now: float) -> bool:
        """One conditional insert: of two deliveries of one event exactly one gets True."""
        params = {"cid": conversation_id, "name": name, "value": value, "now": now}
        return await self._one("put_note", {**params, "replace": False}) is not None

    async def noted(self, name: str, under: str) -> list[str]:
        return [str(r[0]) for r in await self._rows("noted", {"name": name, "under": under})]

    async def swap_note(
        self, conversation_id: str, name: str, expected: str | None, value: str, now: float
    ) -> bool:
        """One conditional statement: of two callers that read `expected`, one gets True."""
        if expected is None:
            return await self.add_note(conversation_id, name, value, now)
        params = {"cid": conversation_id, "name": name, "expected": expected, "value": value}
        return await self._one("swap_note", {**params, "now": now}) is not None

    # cost-guard counters (bot.ops.guards) ----------------------------------------------------
    async def add_to_counter(
        self, scope: str, window_start: int, amount: int, expires_at: float, now: float
    ) -> int:
        """Atomically add to a windowed counter and return its new total (expired rows pruned)."""
        count = {"scope": scope, "window_start": window_start, "amount": amount}
        async with self._transaction() as db:
            await self._rows("prune_counters", {"now": now}, db)
            rows = await self._rows("add_to_counter", {**count, "expires_at": expires_at}, db)
        return int(rows[0][0])

    async def add_once(
        self,
        key: str,
        scope: str,
        window_start: int,
        expires_at: float,
        key_expires_at: float,
        now: float,
    ) -> tuple[int, bool]:
        """Add 1 to a windowed counter once per `key` and remember the new total until
        `key_expires_at`: returns (that total, True) for the first call and (the same total,
        False) for every later one, which adds nothing, even when calls race. One transaction,
        so a repeat waits for the first call and reads what it counted."""
        remembered = {"scope": f"once:{key}", "expires_at": key_expires_at, "window_start": 0}
        async with self._transaction() as db:
            await self._rows("prune_counters", {"now": now}, db)
            if not await self._rows("claim_counter_key", remembered, db):
                known = await self._one("read_counter", remembered, db)
                return (int(known[0]) if known else 0), False
            count = {"scope": scope, "window_start": window_start, "expires_at": expires_at}
            total = int((await self._rows("add_to_counter", {**count, "amount": 1}, db))[0][0])
            await self._rows("remember_counter_total", {**remembered, "amount": total}, db)
        return total, True

    async def read_counter(self, scope: str, window_start: int) -> int:
        rows = await self._rows("read_counter", {"scope": scope, "window_start": window_start})
        return int(rows[0][0]) if rows else 0

    # operator inspection (burstbot status, explain) -----------------------------------------
    async def list_conversations(
        self, active_only: bool = True, limit: int = 50
    ) -> list[ConversationSummary]:
        """Newest activity first; `active_only` keeps conversations with pending input, a timer,
        a lease, or outbox rows pending or failed."""
        rows = await self._rows("list_conversations", {"active": active_only, "limit": limit})
        return [codec.summary_from_row(r) for r in rows]

    async def messages(self, conversation_id: str) -> list[contract.StoredMessage]:
        """Every stored message of a conversation in order, deleted ones included."""
        rows = await self._rows("all_messages", {"cid": conversation_id})
        return [codec.message_from_row(r) for r in rows]

    # inspection ------------------------------------------------------------------------------
    async def backlog(self) -> contract.Backlog:
        """The outbox's backlog for health and metrics (`bot/ops/health.py`)."""
        [row] = await self._rows("backlog", {})
        oldest = None if row["oldest_pending_at"] is None else float(row["oldest_pending_at"])
        return contract.Backlog(int(row["outbox_depth"]), oldest, int(row["outbox_failed"]))

    async def felt_waits(self, since: float) -> list[float]:
        """Seconds from each answered burst's last message to its first visible text, for the
        answers committed since `since` (the operator page's histogram)."""
        rows = await self._rows("felt_waits", {"since": since})
        return [max(0.0, float(r["wait"])) for r in rows]

    async def conversation_state(self, conversation_id: str) -> contract.ConversationState | None:
        r = await self._one("conversation_state", {"cid": conversation_id})
        return None if r is None else codec.state_from_row(conversation_id, r)

    async def replies(self, conversation_id: str | None = None) -> list[OutboxRow]:
        return [self._outbox(r) for r in await self._rows("replies", {"cid": conversation_id})]

    async def generations(
        self, conversation_id: str | None = None
    ) -> list[contract.GenerationRecord]:
        rows = await self._rows("generations", {"cid": conversation_id})
        return [codec.generation_from_row(r) for r in rows]
