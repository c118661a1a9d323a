"""The burst engine: every transition of a conversation, in pipeline order.

Rules (the pipeline of docs/design.md), which this file keeps and nothing else changes:

1. Arrival: a message is stored once (dedupe by platform id), bumps the version and arms the
   conversation's timer: due `quiet` after the last message, never later than `max_wait` after the
   first unanswered one. Bot messages are refused before storage.
2. Timer due: take the lease by compare-and-swap (fencing token + expiry) only with a free
   generation slot and the API's limits allowing one more start (`Admission`, admission.py; in
   fair order, shares.py); if another worker holds it, back off and leave the timer armed.
3. Collect: snapshot V; the burst is the pending messages up to V, edits applied, deletes dropped.
4. Generate once; renew the lease every ttl/3 (failure aborts); on newer input before the deadline,
   cancel the stream at once and let the re-armed timer fire. The watch itself is `supervisor.py`;
   what each of its outcomes means is decided here. The burst's files are fetched inside the
   watched generation (`PromptStep`), never at arrival.
5. Final check + commit in one transaction with the generation's record (token still fences, and
   V is still current unless the deadline passed); otherwise discard.
6. Deliver from the outbox under a claim, with the reply id as idempotency key; retry with backoff.
   This step lives in `outbox.py`: the engine hands it each reply it commits, the scheduler sweeps.
7. Model failures release and re-arm with backoff (doubling, jittered, capped at
   `MODEL_BACKOFF_CAP_SECONDS`); after `max_attempts` (or a permanent error) the failure message is
   posted and the burst counts as answered. No message is lost either way.
8. Clicks (clicks.py): a stop is stored and decided in one transaction before the platform is
   answered; a decided stop moves the version, so the watch cancels the stream, and the worker
   (or, when none generates the burst, whichever takes the lease next) commits the stopped
   answer: the text shown so far and who stopped it, covering the burst; nothing of it is
   generated again. A vote (votes.py) is stored and decided the same way; it changes no burst.
9. Approvals (approvals.py): a call that must ask ends the generation and parks the burst in one
   transaction (the waiting action with its continuation, its card in the outbox, the timer
   until the expiry, the lease released without an answer). The worker that takes the lease next
   ends a card still waiting as superseded (newer input: the newer burst is answered afresh) or
   expired (its time is up), keeps waiting otherwise, and resumes a decided one from its
   continuation. Card endings are posted before the answer that follows them.

A `Burst` (burst.py) is what a worker collected under its lease; it builds the final check and the
replies. Kept out of the transitions: the cost guards (`GuardStep`, guard.py: ask before a model
call, count tokens after it), the streamed draft (streaming.py: shown while the model writes,
handed to the reply by the commit), the thinking indicator (indicator.py) and the named events
(signals.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Mapping
from typing import Any

from bot.core.admission import Admission, Verdict
from bot.core.approvals import ApprovalNeeded, Continuation
from bot.core.attachments import AttachmentLoader
from bot.core.backoff import Backoff
from bot.core.burst import Burst, reply_text, spent
from bot.core.clicks import Click, ClickAnswer, stop_reason, stopped_text
from bot.core.clock import Clock
from bot.core.cpu_budget import WAITING_FOR as CPU_WAITING_FOR
from bot.core.cpu_budget import CpuBudget
from bot.core.errors import PermanentReplierError, ReplierError, StoreError
from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted, MessageEvent
from bot.core.frontend import Frontend
from bot.core.guard import Guard, GuardStep, Refusal
from bot.core.indicator import Indicator
from bot.core.outbox import Outbox
from bot.core.parking import Parking
from bot.core.prompt import PromptStep
from bot.core.replier import GenerationProgress, Replier
from bot.core.settings import APPROVAL_TIMEOUT_SECONDS, EngineSettings
from bot.core.shares import fair_order
from bot.core.signals import Listener, Signals
from bot.core.speculation import Window
from bot.core.store import (
    BurstStore,
    Committed,
    Discarded,
    DueTimer,
    FinalCheck,
    GenerationOutcome,
    IngestResult,
    Lease,
)
from bot.core.streaming import Drafts, Stream
from bot.core.supervisor import Supervision, Supervisor
from bot.core.tool_calls import ToolBox
from bot.core.votes import Vote, VoteAnswer
from bot.core.waits import Waits
from bot.core.wakeup import Wakeup

log = logging.getLogger("burstbot.engine")

HISTORY_LIMIT = 200
MODEL_BACKOFF_CAP_SECONDS = 300.0  # `max_attempts` may be 1,000: a burst is retried at least this
# often (or at its first delay, if longer) until it is answered


def model_backoff(settings: EngineSettings) -> Backoff:
    """The wait before a failed burst's next generation: doubling from `model_backoff_seconds`."""
    first = settings.model_backoff_seconds
    cap = max(first, MODEL_BACKOFF_CAP_SECONDS)
    return Backoff(first, cap, jitter=settings.backoff_jitter)


class Engine:
    """Owns the transitions; the scheduler (scheduler.py) decides when to call `run_due`.

    What it hands work to is built by the composition root and passed in: delivery (`outbox`),
    the thinking indicator, the streamed drafts, the scheduler's alarm (`wakeup`) and the named
    events (`signals`, shared with the outbox)."""

    def __init__(
        self,
        store: BurstStore,
        replier: Replier,
        clock: Clock,
        settings: EngineSettings,
        owner: str,
        frontends: Mapping[str, Frontend] | None = None,
        guard: Guard | None = None,
        tools: ToolBox | None = None,
        *,
        outbox: Outbox,
        indicator: Indicator,
        drafts: Drafts,
        wakeup: Wakeup,
        signals: Signals,
        admission: Admission | None = None,
        cpu: CpuBudget | None = None,
    ) -> None:
        self.admission = admission  # None: only `max_concurrent_generations` bounds
        self.cpu = cpu  # None: this process's CPU does not bound starts
        self._ready_at = 0.0
        self._waits = Waits(signals.emit)
        self.store = store
        self.tools = tools
        self.replier = replier
        self.clock = clock
        self.settings = settings
        self.owner = owner
        self.guard = GuardStep(guard)
        self.signals = signals
        self._emit = self.signals.emit
        served = dict(frontends or {})
        self.indicator = indicator
        self._wakeup = wakeup
        self.outbox = outbox
        self.supervisor = Supervisor(store, clock, settings, self.signals)
        files = AttachmentLoader(store, served, lambda: self.settings.attachments, clock)
        self.prompts = PromptStep(lambda: self.settings, files)
        self.drafts = drafts
        self.parking = Parking(store, outbox, drafts, indicator, self._emit)
        self._workers: dict[str, asyncio.Task[bool]] = {}
        self._committing: set[str] = set()  # workers committing or delivering an outcome
        self._closing = False

    def _emit_for(self, conversation_id: str, name: str, /, **fields: object) -> None:
        self._emit(name, conversation=conversation_id, **fields)

    def subscribe(self, listener: Listener) -> None:
        """Metrics and tests listen to named engine events (`ingested`, `superseded`, ...)."""
        self.signals.subscribe(listener)

    @property
    def ready_at(self) -> float:
        """When the API's limits and this process's CPU let the next generation start (the
        scheduler sleeps until then at least); 0: now, as far as this process knows."""
        return self._ready_at

    @property
    def busy(self) -> int:
        return len(self._workers)

    @property
    def serving(self) -> list[str]:
        """Conversations this process's workers hold: the scheduler does not wake for them."""
        return list(self._workers)

    # 1. arrival -----------------------------------------------------------------------------------
    async def ingest(self, event: MessageEvent) -> IngestResult:
        if isinstance(event, IncomingMessage) and event.author_is_bot:
            self._emit("ignored", conversation=event.key.id, reason="bot author")
            return IngestResult("ignored", event.key.id, 0)
        now = self.clock.now()
        timing = self.settings.timing_for(event.key)
        if isinstance(event, IncomingMessage):
            result = await self.store.ingest(event, now, timing)
        elif isinstance(event, MessageDeleted):
            result = await self.store.delete(event, now, timing)
        else:
            result = await self.store.edit(event, now, timing)
        self._emit(result.status, conversation=result.conversation_id, version=result.version,
                   message_id=event.message_id, change=type(event).__name__,
                   trace_context=result.trace_context, opened=result.opened)  # fmt: skip
        if result.status == "accepted":
            self.supervisor.newer_input(result.conversation_id, result.version)
            due = result.due_at if result.start_at is None else result.start_at
            if due is not None:
                self._wakeup.wake_before(due)
            self.indicator.show(event.key, result.due_at, result.version, event.message_id)
        return result

    async def click(self, click: Click, admin: bool) -> ClickAnswer:
        """A click, stored and decided before the front end answers the platform (G16);
        `admin`: the clicker is one of `[access] admin_ids`."""
        if click.kind != "stop":  # Approve / Deny: the card's parked burst is served now
            approvers = "authors_and_admins" if self.tools is None else self.tools.approvers
            decided = await self.store.decide(click, admin, approvers, self.clock.now())
            self._emit("clicked", conversation=click.key.id, kind=click.kind, outcome=decided)
            if decided in ("approved", "denied"):
                self._wakeup.wake()
            return ClickAnswer(decided, click.kind)
        outcome = await self.store.stop(click, admin, self.clock.now())
        cid = click.key.id
        self._emit("clicked", conversation=cid, kind=click.kind, outcome=outcome)
        if outcome == "stopped":
            self.supervisor.newer_input(cid, stopped=True)  # its stream here is cancelled at once
            self._wakeup.wake()  # a burst no worker generates is served now
        return ClickAnswer(outcome)

    async def vote(self, vote: Vote) -> VoteAnswer:
        """A 👍/👎 press, stored and decided before the front end answers the platform (G16)."""
        outcome = await self.store.vote(vote, self.clock.now())
        self._emit("voted", conversation=vote.click.key.id, outcome=outcome, value=vote.value)
        return VoteAnswer(outcome)

    async def flush(self, key: ConversationKey) -> None:
        await self.store.flush(key.id, self.clock.now())
        self._wakeup.wake()

    async def is_settled(self, key: ConversationKey) -> bool:
        state = await self.store.conversation_state(key.id)
        if state is None:
            return True
        if state.version > state.answered_version or key.id in self._workers:
            return False
        return not await self.outbox.waiting(key.id)

    # 2. timers and leases -------------------------------------------------------------------------
    async def run_due(self) -> int:
        """Start a worker for each due timer, as far as free generation slots, this process's CPU
        and the API's limits allow (`admission`); when not all may start, in fair order
        (shares.py)."""
        if self._closing:
            return 0
        free = self.settings.max_concurrent_generations - len(self._workers)
        if free <= 0:
            return 0
        now = self.clock.now()
        timers = await self.store.due_timers(now, free + len(self._workers))
        waiting = [t for t in timers if t.conversation_id not in self._workers]
        wanted = min(free, len(waiting))
        verdict = await self._admit(wanted, now)
        granted = wanted if verdict is None else verdict.granted
        chosen = waiting if granted >= len(waiting) else await self._fair_order(waiting, now)
        if verdict is not None:
            self._waits.note(chosen[:wanted], verdict, now)
        chosen = chosen[:granted]
        started = 0
        for timer in chosen:
            task = asyncio.create_task(self._work(timer))
            self._workers[timer.conversation_id] = task
            task.add_done_callback(functools.partial(self._worker_done, timer.conversation_id))
            started += 1
        return started

    async def _fair_order(self, waiting: list[DueTimer], now: float) -> list[DueTimer]:
        """Not all may start: the order decides who, with every process's generations counted
        (one query, only when capacity is short)."""
        shares = await self.store.shares(now)
        people = {share.conversation_id: share.person for share in shares}
        leased = [share.conversation_id for share in shares if share.generating]
        return fair_order(waiting, {*self._workers, *leased}, now, people)

    async def _admit(self, wanted: int, now: float) -> Verdict | None:
        """How many of `wanted` starts this process's CPU, then the API's limits, allow now
        (None: nothing bounds them but the slots)."""
        if wanted <= 0 or (self.cpu is None and self.admission is None):
            return None
        verdict = Verdict(wanted, now, "")
        allowed = None if self.cpu is None else self.cpu.allowed(len(self._workers))
        if self.cpu is not None and allowed is not None and allowed < wanted:
            verdict = Verdict(allowed, now + self.cpu.retry_in, CPU_WAITING_FOR)
        if self.admission is not None and verdict.granted > 0:
            heard = await self.admission.admit(verdict.granted)
            if heard.granted < verdict.granted:
                verdict = heard
        if self.cpu is not None:
            self.cpu.granted(verdict.granted)
        self._ready_at = verdict.ready_at if verdict.granted < wanted else now
        return verdict

    def _worker_done(self, conversation_id: str, task: asyncio.Task[bool]) -> None:
        """A freed slot or a settled conversation may have work due now; a worker that could not
        even take the lease (the store failing) does not wake the loop, or it would spin."""
        self._workers.pop(conversation_id, None)
        self._committing.discard(conversation_id)
        self._waits.started(conversation_id)  # a worker that never collected its burst
        if task.cancelled() or task.exception() is not None or task.result():
            self._wakeup.wake()

    async def _work(self, timer: DueTimer) -> bool:
        """One admitted start: a start that never reached the API gives its share back."""
        start = None if self.admission is None else self.admission.starting()
        served = await self._take_and_serve(timer)
        if self.admission is not None and start is not None:
            await self.admission.unused(start)
        return served

    async def _take_and_serve(self, timer: DueTimer) -> bool:
        cid = timer.conversation_id
        now = self.clock.now()
        ttl = self.settings.lease_ttl_seconds
        try:
            lease = await self.store.acquire_lease(cid, self.owner, now, ttl)
        except StoreError as exc:
            log.warning("conversation %s: cannot take the lease (%s); will retry", cid, exc)
            return False
        if lease is None:
            expiry = await self.store.lease_expiry(cid, now)
            retry_at = now + self.settings.busy_retry_seconds
            if expiry is not None and expiry > now:
                retry_at = min(retry_at, expiry)
            await self.store.postpone_timer(cid, retry_at, now)
            self._emit("lease_conflict", conversation=cid, retry_at=retry_at)
            return False
        self._emit("lease_acquired", conversation=cid, token=lease.token, version=lease.version,
                   trace_context=lease.trace_context, taken_over=lease.taken_over)  # fmt: skip
        if lease.taken_over:
            self._emit("lease_takeover", conversation=cid, token=lease.token)
        try:
            await self._serve(lease)
        except asyncio.CancelledError:
            await self._release_quietly(lease)
            raise
        except StoreError as exc:  # the timer stays armed: served again once the store answers
            log.warning("conversation %s: store failed (%s); lease released", cid, exc)
            await self._release_quietly(lease)
        except Exception:
            log.exception("conversation %s: unexpected failure; lease released", cid)
            await self._release_quietly(lease)
        return True

    async def _release_quietly(self, lease: Lease) -> None:
        """After a failure: a lease that cannot be released expires by itself (logged)."""
        try:
            await asyncio.shield(self.store.release_lease(lease.conversation_id, lease.token))
        except Exception as exc:
            log.warning("conversation %s: cannot release the lease (%r); it expires by itself",
                        lease.conversation_id, exc)  # fmt: skip

    # 3. collect, and bursts answered without a model call -----------------------------------------
    async def _serve(self, lease: Lease) -> None:
        cid = lease.conversation_id
        if lease.version <= lease.answered_version:
            await self.store.drop_timer(cid, lease.version)
            await self.store.release_lease(cid, lease.token)
            return
        key = ConversationKey.parse(cid)
        pending = await self.store.pending_messages(cid, lease.answered_version, lease.version)
        timing, now = self.settings.timing_for(key), self.clock.now()
        burst = Burst(lease, key, timing, tuple(pending), now, *self._waits.started(cid))
        if lease.stop_version is not None:  # stopped while no generation of it ran here
            await self._stopped(burst, GenerationProgress())
            return
        asks = self.tools is not None and self.tools.approvals is not None
        parked = await self.store.parked(cid, lease.answered_version) if asks else None
        if parked is not None:  # rule 9 (with every message deleted meanwhile: superseded)
            step = await self.parking.unparked(burst, parked)
            if step == "waiting":  # parked again, the lease released
                return
            if isinstance(step, Continuation) and burst.messages:
                await self._generate(burst, step)
                return
        if not burst.messages:
            if await self._until_close(lease):
                await self._all_deleted(burst)
            return
        refusal = await self.guard.admit(key, burst.messages, burst.started_at)
        if refusal is not None:
            if await self._until_close(lease):  # nothing is committed before the close (G4)
                await self._refused(burst, refusal)
            return
        await self._generate(burst)

    async def _until_close(self, lease: Lease) -> bool:
        """A lease taken before its burst's window closed keeps it until then; False once lost."""
        window = Window(self.store, self.clock, lease.conversation_id, lease.closes_at)
        if not window.speculative:
            return True

        async def closed() -> str:
            await window.closed.wait()
            return ""

        try:
            outcome = await self.supervisor.watch(asyncio.create_task(closed()), lease, -math.inf)
        finally:
            await window.stop()
        return outcome is Supervision.DONE

    async def _all_deleted(self, burst: Burst) -> None:
        """Every message of the burst was deleted: answered without a reply (skipped, logged)."""
        cid, now = burst.lease.conversation_id, burst.started_at
        self._committing.add(cid)
        await self.drafts.discard(burst)
        done = await self.store.commit(cid, burst.final_check(now), now, burst.timing, None)
        if isinstance(done, Discarded):
            await self.store.release_lease(cid, burst.lease.token)
            return
        log.info("conversation %s: every message of the burst was deleted; skipped", cid)
        await self._record(burst, "skipped", GenerationProgress(), "all messages deleted")
        self.indicator.clear(burst.key)

    async def _refused(self, burst: Burst, refusal: Refusal) -> None:
        """A cost guard stopped the burst: no model call. It is answered with the guard's notice,
        or silently (skipped, logged) when that notice was already sent this window."""
        cid, now = burst.lease.conversation_id, burst.started_at
        self._committing.add(cid)
        notice = None if refusal.notice is None else burst.apology(refusal.notice)
        if notice is None:
            await self.drafts.discard(burst)  # no reply will take the draft over
        check = burst.final_check_past_newer_input()
        done = await self.store.commit(cid, check, now, burst.timing, notice)
        if isinstance(done, Discarded):
            await self.store.release_lease(cid, burst.lease.token)
            return
        log.warning("conversation %s: burst refused (%s); no model call", cid, refusal.reason)
        await self._record(burst, "skipped", GenerationProgress(), refusal.reason)
        self._emit("refused", conversation=cid, reason=refusal.reason, stage="burst")
        if done.reply is None:
            self.indicator.clear(burst.key)
        else:
            await self.outbox.deliver_due(reply_id=done.reply.id)

    async def _park(self, burst: Burst, usage: GenerationProgress, asked: ApprovalNeeded) -> None:
        """The generation stopped at a call that must ask: parked, its card posted (rule 9)."""
        self._committing.add(burst.lease.conversation_id)
        wait = self.tools.approval_timeout if self.tools is not None else APPROVAL_TIMEOUT_SECONDS
        parked = await self.parking.park(burst, asked, wait)
        if parked is None:
            await self._record(burst, "lease_lost", usage)
            return
        action = asked.action
        await self._record(burst, "parked", usage, f"{action.server}.{action.tool} asks")

    # 4. generate once -----------------------------------------------------------------------------
    async def _generate(self, burst: Burst, resume: Continuation | None = None) -> None:
        lease, cid = burst.lease, burst.lease.conversation_id
        history = await self.store.history(cid, lease.answered_version, HISTORY_LIMIT)
        announce = functools.partial(self._emit_for, cid)  # the replier's and tools' events
        usage = GenerationProgress(announce=announce)
        window = Window(self.store, self.clock, cid, lease.closes_at,
                        lambda name: self._emit(name, conversation=cid))  # fmt: skip
        self._emit("generating", conversation=cid, version=lease.version,
                   burst=len(burst.messages), speculative=window.speculative,
                   closed_by=lease.close_reason, attempt=lease.failed_attempts + 1,
                   waited=burst.started_at - burst.messages[0].created_at)  # fmt: skip
        # a tool with an effect waits for the close: never run by a speculation (G14)
        calls = None if self.tools is None else self.tools.for_burst(burst, announce, window.closed)
        if calls is not None:
            calls.resume = resume
        prompted = self.prompts.generate(
            self.replier, burst.key, history, burst.messages, usage, calls
        )
        generation = asyncio.create_task(window.held(prompted))  # committed after the close only
        stream = self.drafts.follow(burst, usage, generation, window)  # G10, from the close
        try:
            outcome = await self.supervisor.watch(generation, lease, burst.deadline, stream.renewed)
        except BaseException:  # cancelled (shutdown) or the store failed: no stream runs on
            stream.abort()
            raise
        finally:
            await window.stop()
        await stream.stop(outcome)
        await self.guard.charge(burst.key, burst.messages, spent(usage), self.clock.now())
        if self.admission is not None:
            self.admission.spent(usage.input_tokens + usage.cache_write_tokens, usage.output_tokens)
        if outcome is Supervision.STOPPED:
            await self._stopped(burst, usage)
            return
        if outcome is Supervision.SUPERSEDED:
            await self._record(burst, "superseded", usage)
            self._emit("superseded", conversation=cid, wasted=usage.output_tokens,
                       speculative=window.open)  # fmt: skip
            await self.store.release_lease(cid, lease.token)
            return
        if outcome is Supervision.LEASE_LOST:
            await self._record(burst, "lease_lost", usage)
            log.warning("conversation %s: lease lost during generation; reply dropped", cid)
            return
        asked = None if generation.cancelled() else generation.exception()
        if isinstance(asked, ApprovalNeeded):
            await self._park(burst, usage, asked)
            return
        try:
            text = reply_text(generation, cid)
        except ReplierError as exc:
            if window.open:  # a speculation failed: the real start at the close is not delayed
                await self._speculation_failed(burst, usage, exc)
            else:
                await self._model_failed(burst, usage, exc)
            return
        await self._commit(burst, text, usage, stream)

    # 5. final check + commit ----------------------------------------------------------------------
    async def _commit(
        self, burst: Burst, text: str, usage: GenerationProgress, stream: Stream
    ) -> None:
        lease, cid = burst.lease, burst.lease.conversation_id
        self._committing.add(cid)
        if self.tools is not None and self.tools.approvals is not None:
            await self.parking.deliver_cards(cid)  # a card's ending goes before the answer
        now = self.clock.now()
        feedback = self.settings.feedback_for(burst.key)  # a stopped answer has no buttons
        reply = burst.answer(text, usage, feedback)
        posted = burst.record("posted", usage, now, None)
        check, claim = burst.final_check(now), self.outbox.claim  # delivery's claim, in the commit
        self._emit("committing", conversation=cid, version=lease.version)
        done = await self.store.commit(cid, check, now, burst.timing, reply, posted, claim)
        if not isinstance(done, Committed) or (row := done.reply) is None:
            await self._record(burst, "discarded", usage)
            self._emit("discarded", conversation=cid, version=lease.version)
            await stream.still_reading()  # its text is not the answer: the next generation's is
            await self.store.release_lease(cid, lease.token)
            return
        self.signals.generation(posted)  # recorded by the commit
        self._emit("committed", conversation=cid, reply_id=row.id, version=lease.version,
                   latency=now - burst.messages[-1].created_at)  # fmt: skip
        await self.outbox.deliver_committed(done)

    async def _stopped(self, burst: Burst, usage: GenerationProgress) -> None:
        """A person stopped the burst: it is answered by what was shown so far and who stopped
        it, through the draft's final edit; the commit covers everything the stop covered."""
        lease, cid = burst.lease, burst.lease.conversation_id
        self._committing.add(cid)
        stop = await self.store.pending_stop(cid)
        now = self.clock.now()
        if stop is None:  # answered meanwhile by another worker
            await self.store.release_lease(cid, lease.token)
            return
        text = stopped_text("".join(usage.streamed), stop.clicker_name)
        reply = burst.answer(text, usage)
        record = burst.record("stopped", usage, now, stop_reason(stop.clicker_name))
        check = FinalCheck(lease.token, stop.version, deadline_passed=True, stopping=True)
        done = await self.store.commit(
            cid, check, now, burst.timing, reply, record, self.outbox.claim
        )
        if not isinstance(done, Committed) or done.reply is None:
            await self._record(burst, "discarded", usage)
            await self.store.release_lease(cid, lease.token)
            return
        self.signals.generation(record)
        log.info("conversation %s: stopped by %s", cid, stop.clicker_name)
        self._emit("stopped", conversation=cid, reply_id=done.reply.id, by=stop.clicker_id)
        await self.outbox.deliver_committed(done)

    # 7. model failures ----------------------------------------------------------------------------
    async def _model_failed(
        self, burst: Burst, usage: GenerationProgress, exc: ReplierError
    ) -> None:
        lease, cid = burst.lease, burst.lease.conversation_id
        self._committing.add(cid)
        attempts = lease.failed_attempts + 1
        await self._record(burst, "failed", usage, str(exc))
        now = self.clock.now()
        if isinstance(exc, PermanentReplierError) or attempts >= self.settings.model_max_attempts:
            log.error(
                "conversation %s: model failed (%s, attempt %d); posting the failure message",
                cid, exc, attempts,
            )  # fmt: skip
            apology = burst.apology(self.settings.failure_message)
            check = burst.final_check_past_newer_input()
            done = await self.store.commit(cid, check, now, burst.timing, apology)
            if isinstance(done, Committed) and (row := done.reply) is not None:
                self._emit("apology", conversation=cid, reply_id=row.id)
                await self.outbox.deliver_due(reply_id=row.id)
            return
        retry_at = now + model_backoff(self.settings).delay(attempts)
        log.warning(
            "conversation %s: model failed (%s); retry %d at +%.1fs",
            cid, exc, attempts, retry_at - now,
        )  # fmt: skip
        await self.store.record_failure(cid, lease.token, retry_at, now)
        self._emit("model_retry", conversation=cid, attempt=attempts)

    async def _speculation_failed(
        self, burst: Burst, usage: GenerationProgress, exc: ReplierError
    ) -> None:
        """A model failure (a 429, an overload) before the window closed counts no attempt and
        backs nothing off: released, the timer is due at its close and the generation starts
        again then, like one that never speculated."""
        cid = burst.lease.conversation_id
        await self._record(burst, "failed", usage, f"speculation: {exc}")
        log.info("conversation %s: early generation failed (%s); starting at the close", cid, exc)
        await self.store.release_lease(cid, burst.lease.token)
        self._emit("speculation_failed", conversation=cid)

    # every generation ends in one record ----------------------------------------------------------
    async def _record(
        self,
        burst: Burst,
        outcome: GenerationOutcome,
        usage: GenerationProgress,
        error: str | None = None,
    ) -> None:
        record = burst.record(outcome, usage, self.clock.now(), error)
        await self.store.record_generation(record)
        self.signals.generation(record)

    # lifecycle ------------------------------------------------------------------------------------
    async def idle(self) -> None:
        """Wait until no worker or delivery of this process is running (tests, shutdown)."""
        while running := [*self._workers.values(), *self.outbox.running, *self.indicator.running]:
            await asyncio.gather(*running, return_exceptions=True)

    def stop_taking_work(self) -> None:
        """No new timers are served, streaming generations are cancelled (each releases its lease)
        and indicators go off; workers committing or delivering go on (`finish`)."""
        self._closing = True
        self.indicator.close()
        for cid, task in self._workers.items():
            if cid not in self._committing:
                task.cancel()

    async def finish(self, grace: float) -> None:
        """Give commits and deliveries in flight `grace` seconds on the engine's clock, then
        cancel what is left. A cancelled delivery keeps its claim until `release`: the front
        ends stop first, so nothing of ours posts after another process took the row over."""

        def running() -> list[asyncio.Task[Any]]:
            return [*self._workers.values(), *self.outbox.running, *self.indicator.running]

        timeout = asyncio.ensure_future(self.clock.sleep_until(self.clock.now() + grace))
        try:
            while (left := running()) and not timeout.done():
                await asyncio.wait({*left, timeout}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timeout.cancel()
        if left := running():
            log.warning("shutdown: %d task(s) still committing or delivering; cancelled", len(left))
            for task in left:
                if not task.cancelling():  # a generation cancelled above is releasing its lease
                    task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        await self.idle()
        await self.outbox.draft_posts.cancel()  # none runs on unseen: the next process looks

    async def release(self) -> None:
        """Release every lease and delivery claim still held under our owner name, so another
        process takes them over at once instead of waiting for them to expire."""
        released = await self.store.release_owner(self.owner)
        if released:
            log.info("released %d lease(s) on shutdown", released)
