-- The statements both dialects share, by name (sql_store.py runs them; sqlite.sql and postgres.sql
-- hold the schema and the few statements that really differ). Times are seconds since the epoch.
-- Every compare-and-swap is one conditional statement whose RETURNING rows the caller reads.
--
-- Written to run on both: `:name` parameters (PostgreSQL gets $n, one per name); a CAST where
-- PostgreSQL cannot tell a parameter's type from its context (arithmetic, IS NULL, a bare boolean),
-- with type names SQLite reads too (FLOAT8 has REAL affinity, BOOLEAN numeric); `NOT deleted`;
-- LEAST/GREATEST, which SQLite runs as its multi-argument MIN/MAX; a list as
-- `= ANY(CAST(:list AS TEXT[]))`, which SQLite reads from JSON text with json_each; PostgreSQL's
-- row locks (`FOR UPDATE`, `FOR NO KEY UPDATE`, `SKIP LOCKED`), which SQLite leaves out: its
-- transactions' BEGIN IMMEDIATE already holds the write lock.
--
-- One clock for the protocol (G12). `:db_now` is the database's clock: it stamps and is compared
-- with every protocol time (debounce due and deadline, lease and claim expiry, a message's arrival,
-- which catch-up windows read). On PostgreSQL it is the statement's own timestamp; on SQLite, whose
-- database is the host, it is the caller's `:now`. A caller's time crosses over by its distance
-- from the caller's `:now`: `:skew` is the caller's clock minus the database's as of the statement
-- (0 on SQLite), so a time T the caller passes is `T - :skew` here, and a stored time S goes back
-- to the caller as `S + :skew`. Only differences cross between clocks: a host whose clock is off
-- changes nothing. Times outside the protocol (cost-guard windows, what was fetched or decided
-- when) stay on the caller's clock.

-- 1. arrival --------------------------------------------------------------------------------------

-- name: ensure_conversation
INSERT INTO conversations (id, platform, created_at) VALUES (:cid, :platform, :db_now)
ON CONFLICT (id) DO NOTHING;

-- name: ingest_savepoint
-- A duplicate message id rolls back to here: the version bump is undone, nothing else changed.
SAVEPOINT ingest;

-- name: undo_ingest
ROLLBACK TO SAVEPOINT ingest;

-- name: bump_version
-- Ingest bumps first: the row lock orders concurrent arrivals, so seq = the new version is unique.
-- The burst's trace context is kept from its first message (:trace_context, a fresh one, is used
-- only when the conversation has none: the burst opens here).
UPDATE conversations
SET version = version + 1, trace_context = COALESCE(trace_context, CAST(:trace_context AS TEXT))
WHERE id = :cid RETURNING version, trace_context;

-- name: insert_message
INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, author_name, text,
                      created_at, via, attachments)
VALUES (:cid, :seq, :uid, :message_id, :author_id, :author_name, :text, :db_now, :via,
        :attachments)
ON CONFLICT (message_uid) DO NOTHING
RETURNING seq;

-- name: arm_timer
-- The deadline is kept from the timer's first arming; the quiet window restarts with every change.
-- The window closes at due_at = min(now + quiet, deadline): `quiet` is this arrival's window, the
-- one place it enters. With speculation (:speculate_after not NULL) the generation may start at
-- start_at = min(now + speculate_after, due_at); NULL: it starts at due_at.
INSERT INTO debounce_timers AS t (conversation_id, due_at, deadline_at, quiet_until, armed_version,
                                  start_at)
VALUES (:cid,
        CAST(:db_now AS FLOAT8) + LEAST(CAST(:quiet AS FLOAT8), CAST(:max_wait AS FLOAT8)),
        CAST(:db_now AS FLOAT8) + CAST(:max_wait AS FLOAT8),
        CAST(:db_now AS FLOAT8) + CAST(:quiet AS FLOAT8),
        :version,
        CAST(:db_now AS FLOAT8) + CASE WHEN CAST(:speculate_after AS FLOAT8) IS NOT NULL
            THEN LEAST(CAST(:speculate_after AS FLOAT8), CAST(:quiet AS FLOAT8),
                       CAST(:max_wait AS FLOAT8)) END)
ON CONFLICT (conversation_id) DO UPDATE SET
    quiet_until = excluded.quiet_until,
    due_at = LEAST(excluded.quiet_until, t.deadline_at),
    start_at = CASE WHEN excluded.start_at IS NOT NULL
                    THEN LEAST(excluded.start_at, t.deadline_at) END,
    armed_version = excluded.armed_version
RETURNING due_at + :skew, start_at + :skew;

-- name: change_message
-- An edit (new text; files replaced when it names them, NULL: the platform did not say; kept), or
-- a delete.
UPDATE messages
SET text = COALESCE(CAST(:text AS TEXT), text), deleted = CAST(:deleted AS BOOLEAN),
    edited_at = :db_now, attachments = COALESCE(CAST(:attachments AS TEXT), attachments)
WHERE message_uid = :uid AND NOT deleted
RETURNING seq;

-- name: find_message
-- Locks the conversation row, so an edit and a concurrent commit see each other's answered_version.
SELECT m.conversation_id, m.seq, m.deleted, c.answered_version
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.message_uid = :uid
FOR NO KEY UPDATE OF c;

-- name: extend_quiet_for_typing
-- An author of the pending burst is typing: its quiet window lasts until :until, never past the
-- deadline and never shorter than it was (a lease's hold stays). A conversation with nothing
-- pending from that author matches no row: nothing is created or changed.
UPDATE debounce_timers
SET quiet_until = GREATEST(quiet_until, LEAST(CAST(:until AS FLOAT8) - :skew, deadline_at)),
    due_at = GREATEST(due_at, LEAST(CAST(:until AS FLOAT8) - :skew, deadline_at))
WHERE conversation_id = :cid
  AND EXISTS (SELECT 1 FROM messages m JOIN conversations c ON c.id = m.conversation_id
              WHERE m.conversation_id = :cid AND m.author_id = :author
                AND m.seq > c.answered_version AND NOT m.deleted)
RETURNING due_at + :skew;

-- name: flush_timer
-- The window closes now (a generation that started early stops holding).
UPDATE debounce_timers
SET due_at = LEAST(due_at, CAST(:db_now AS FLOAT8)),
    quiet_until = LEAST(quiet_until, CAST(:db_now AS FLOAT8)),
    start_at = CASE WHEN start_at IS NOT NULL THEN LEAST(start_at, CAST(:db_now AS FLOAT8)) END
WHERE conversation_id = :cid;

-- The adaptive quiet window (storage/rhythm.py, bot/core/quiet_window.py): each person's rhythm,
-- read and written in the arrival's transaction, after the message is stored as seq :seq.

-- name: author_rhythm
-- The author's rhythm, the gap since their previous message (database clock) and whether that
-- message was the last one in this conversation before this one (nobody wrote in between).
SELECT r.messages, r.follow_ups, r.mean_log_gap, r.var_log_gap,
       CAST(:db_now AS FLOAT8) - r.last_at AS since_last,
       r.last_conversation = :cid AND COALESCE(
           (SELECT p.author_id FROM messages p WHERE p.conversation_id = :cid AND p.seq < :seq
            ORDER BY p.seq DESC LIMIT 1) = :author_id, FALSE) AS consecutive
FROM author_rhythm r WHERE r.author_uid = :author_uid;

-- name: save_author_rhythm
INSERT INTO author_rhythm AS r (author_uid, messages, follow_ups, mean_log_gap, var_log_gap,
                                last_at, last_conversation)
VALUES (:author_uid, :messages, :follow_ups, :mean_log_gap, :var_log_gap, :db_now, :cid)
ON CONFLICT (author_uid) DO UPDATE SET
    messages = excluded.messages, follow_ups = excluded.follow_ups,
    mean_log_gap = excluded.mean_log_gap, var_log_gap = excluded.var_log_gap,
    last_at = excluded.last_at, last_conversation = excluded.last_conversation;

-- name: burst_authors
-- Each author of the pending burst up to :seq: their last message's text and age, their rhythm.
SELECT m.author_id, m.author_name, m.text, CAST(:db_now AS FLOAT8) - m.created_at AS age,
       r.messages, r.follow_ups, r.mean_log_gap, r.var_log_gap
FROM messages m
JOIN conversations c ON c.id = m.conversation_id
LEFT JOIN author_rhythm r ON r.author_uid = CAST(:author_prefix AS TEXT) || m.author_id
WHERE m.conversation_id = :cid AND m.seq > c.answered_version AND m.seq <= :seq AND NOT m.deleted
  AND m.seq = (SELECT MAX(l.seq) FROM messages l
               WHERE l.conversation_id = m.conversation_id AND l.author_id = m.author_id
                 AND l.seq > c.answered_version AND l.seq <= :seq AND NOT l.deleted);

-- name: note_quiet_window
UPDATE messages SET quiet_reason = :reason WHERE conversation_id = :cid AND seq = :seq;

-- 2. timers and leases ----------------------------------------------------------------------------

-- name: earliest_timers
-- The scheduler skips the conversations this process is already serving (their timers may be
-- due at once: input past the deadline), so it reads a few more than it skips. A timer is due at
-- its speculative start if one is armed (start_at <= due_at), else at due_at: the earliest of each
-- kind, through its own index (the caller takes the earliest of both).
SELECT conversation_id, due_at + :skew
FROM (SELECT conversation_id, due_at FROM debounce_timers ORDER BY due_at LIMIT :limit) AS closing
UNION ALL
SELECT conversation_id, start_at + :skew
FROM (SELECT conversation_id, start_at FROM debounce_timers WHERE start_at IS NOT NULL
      ORDER BY start_at LIMIT :limit) AS starting;

-- name: due_timers
-- Skips timers another transaction is changing right now (a lease being taken, a re-arm).
SELECT conversation_id, due_at + :skew, deadline_at + :skew, armed_version, start_at + :skew
FROM debounce_timers WHERE due_at <= CAST(:db_now AS FLOAT8) ORDER BY due_at LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: speculative_timers
-- Timers due at their early start whose window is still open (`due_timers` takes the closed ones
-- first).
SELECT conversation_id, due_at + :skew, deadline_at + :skew, armed_version, start_at + :skew
FROM debounce_timers WHERE start_at <= CAST(:db_now AS FLOAT8) AND due_at > CAST(:db_now AS FLOAT8)
ORDER BY start_at LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: postpone_timer
-- Leased elsewhere: no early start any more, and not before :due_at (a window still open stays so).
UPDATE debounce_timers SET due_at = GREATEST(due_at, CAST(:due_at AS FLOAT8) - :skew), start_at = NULL
WHERE conversation_id = :cid AND COALESCE(start_at, due_at) <= CAST(:db_now AS FLOAT8);

-- name: acquire_lease
-- One compare-and-swap, tried in turn: a free lease, then (takeover) one whose holder let it
-- expire without releasing it.
UPDATE conversations
SET lease_owner = :owner, lease_token = lease_token + 1,
    lease_expires_at = CAST(:db_now AS FLOAT8) + CAST(:ttl AS FLOAT8)
WHERE id = :cid AND CASE WHEN CAST(:takeover AS BOOLEAN)
    THEN lease_owner IS NOT NULL AND lease_expires_at < CAST(:db_now AS FLOAT8)
    ELSE lease_owner IS NULL END
RETURNING id AS conversation_id, lease_owner AS owner, lease_token AS token, version,
          answered_version, failed_attempts, lease_expires_at,
          lease_expires_at + :skew AS expires_at,
          CASE WHEN stop_version > answered_version THEN stop_version END AS stop_version,
          trace_context;

-- name: hold_timer
-- While a lease is held the timer waits for the lease's expiry (takeover after a crash), unless
-- newer input re-armed it; the generation under the lease is the early start, if one was armed.
-- :expires_at is the lease's expiry as stored; returned: the burst's deadline and its window's
-- close (on the caller's clock), which a new lease reports.
UPDATE debounce_timers
SET due_at = CASE WHEN armed_version <= :version THEN GREATEST(due_at, :expires_at) ELSE due_at END,
    start_at = CASE WHEN armed_version <= :version THEN NULL ELSE start_at END
WHERE conversation_id = :cid
RETURNING deadline_at + :skew, LEAST(quiet_until, deadline_at) + :skew;

-- name: window_closes_at
-- When the burst's window closes (a typing notice may have moved it since the lease was taken).
SELECT LEAST(quiet_until, deadline_at) + :skew FROM debounce_timers WHERE conversation_id = :cid;

-- name: lease_expiry
SELECT lease_expires_at + :skew FROM conversations WHERE id = :cid AND lease_owner IS NOT NULL;

-- name: renew_lease
UPDATE conversations SET lease_expires_at = CAST(:db_now AS FLOAT8) + CAST(:ttl AS FLOAT8)
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING lease_expires_at, lease_expires_at + :skew AS expires_here;

-- name: release_lease
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING id;

-- name: restore_timer
-- Back to the natural schedule (quiet window, capped by the deadline) once no lease holds them:
-- the timers of :cids, conversations whose rows the caller changed first.
UPDATE debounce_timers SET due_at = LEAST(due_at, quiet_until, deadline_at)
WHERE conversation_id = ANY(CAST(:cids AS TEXT[]));

-- name: drop_timer
DELETE FROM debounce_timers WHERE conversation_id = :cid AND armed_version <= :version;

-- name: release_owner_leases
-- Conversation rows first, then their timers (`restore_timer`): the usual lock order.
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner = :owner
RETURNING id;

-- name: release_owner_claims
UPDATE replies SET claim_owner = NULL, claim_expires_at = NULL
WHERE claim_owner = :owner AND state = 'pending';

-- 3. collect --------------------------------------------------------------------------------------

-- name: current_version
SELECT version FROM conversations WHERE id = :cid;

-- name: pending_messages
SELECT seq, message_id, author_id, author_name, text, created_at, edited_at, deleted, via,
       attachments, quiet_reason
FROM messages
WHERE conversation_id = :cid AND seq > :after AND seq <= :upto AND NOT deleted
ORDER BY seq;

-- name: history
SELECT role, author_name, text, version, attachments FROM (
    SELECT 'user' AS role, author_name, text, seq AS version, 0 AS ord, attachments
    FROM messages WHERE conversation_id = :cid AND seq <= :upto AND NOT deleted
    UNION ALL
    SELECT 'assistant', '', text, covers_to_version, 1, '[]'
    FROM replies WHERE conversation_id = :cid AND covers_to_version <= :upto
                   AND state != 'failed' AND kind = 'answer'
) AS turns
WHERE version > (SELECT history_floor FROM conversations WHERE id = :cid)
ORDER BY version DESC, ord DESC LIMIT :limit;

-- 5. final check + commit -------------------------------------------------------------------------

-- name: lock_answered_version
-- The commit's first statement: the conversation row is locked before its timer and outbox.
SELECT answered_version FROM conversations WHERE id = :cid FOR NO KEY UPDATE;

-- name: final_check
-- A decided stop (clicks below) wins over the generation's own answer: only the stopped answer,
-- covering up to the stop's version, commits while the stop is pending. The answered burst's
-- trace context goes with it; input already past :version opens the next burst's (:next_trace).
UPDATE conversations
SET answered_version = :version, lease_owner = NULL, lease_expires_at = NULL, failed_attempts = 0,
    trace_context = CASE WHEN version > :version THEN CAST(:next_trace AS TEXT) END
WHERE id = :cid AND lease_token = :token AND answered_version < :version
  AND (version = :version OR CAST(:deadline_passed AS BOOLEAN))
  AND CASE WHEN CAST(:stopping AS BOOLEAN) THEN stop_version = :version
           ELSE COALESCE(stop_version, 0) <= answered_version END
RETURNING version;

-- name: insert_reply
INSERT INTO replies (conversation_id, platform, covers_from_version, covers_to_version,
                     seen_version, reply_to_message_id, text, kind, next_attempt_at, created_at,
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, feedback,
                     model)
VALUES (:cid, :platform, :covers_from, :version, :seen_version, :reply_to_message_id, :text, :kind,
        :db_now, :db_now, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens,
        CAST(:feedback AS BOOLEAN), :model)
RETURNING *;

-- name: restart_cap
UPDATE debounce_timers
SET deadline_at = CAST(:db_now AS FLOAT8) + CAST(:max_wait AS FLOAT8),
    due_at = LEAST(quiet_until, CAST(:db_now AS FLOAT8) + CAST(:max_wait AS FLOAT8))
WHERE conversation_id = :cid AND armed_version > :version;

-- name: count_failure
UPDATE conversations
SET failed_attempts = failed_attempts + 1, lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING failed_attempts;

-- name: rearm_after_failure
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, CAST(:retry_at AS FLOAT8) - :skew, CAST(:retry_at AS FLOAT8) - :skew,
        CAST(:retry_at AS FLOAT8) - :skew, 0)
ON CONFLICT (conversation_id) DO UPDATE SET due_at = excluded.due_at, start_at = NULL;

-- name: record_generation
INSERT INTO generations (conversation_id, lease_token, from_version, to_version, started_at,
                         ended_at, outcome, input_tokens, output_tokens, cache_read_tokens,
                         cache_write_tokens, error, model, user_id, web_searches, searches,
                         waited, waited_for)
VALUES (:conversation_id, :lease_token, :from_version, :to_version, :started_at, :ended_at,
        :outcome, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens, :error,
        :model, :user_id, :web_searches, :searches, :waited, :waited_for);

-- 6. deliver (claim_replies picks rows its own way in each dialect) -----------------------------

-- name: claim_new_reply
-- In the commit that inserted it, so nobody else can hold a claim on it yet: claimed unless an
-- earlier reply of its conversation is still pending (G9: in commit order). A claim is not an
-- attempt: `attempts` counts failures (mark_retry, mark_failed), claim_token counts claims.
UPDATE replies
SET claim_owner = :owner, claim_expires_at = CAST(:db_now AS FLOAT8) + CAST(:ttl AS FLOAT8),
    claim_token = claim_token + 1
WHERE id = :reply_id
  AND NOT EXISTS (SELECT 1 FROM replies AS e
                  WHERE e.conversation_id = replies.conversation_id AND e.state = 'pending'
                    AND e.id < replies.id)
RETURNING *, claim_expires_at + :skew AS claim_expires_here;

-- name: next_outbox_at
-- Only the first pending reply of each conversation can be claimed next.
SELECT MIN(CASE WHEN r.claim_owner IS NULL THEN r.next_attempt_at
                ELSE GREATEST(r.next_attempt_at, r.claim_expires_at) END) + :skew
FROM replies r
WHERE r.state = 'pending' AND r.platform = ANY(CAST(:platforms AS TEXT[]))
  AND NOT EXISTS (SELECT 1 FROM replies e
                  WHERE e.conversation_id = r.conversation_id AND e.state = 'pending'
                    AND e.id < r.id);

-- name: renew_claim
-- A delivery keeps its claim while it posts (every ttl/3), like a generation keeps its lease.
UPDATE replies SET claim_expires_at = CAST(:db_now AS FLOAT8) + CAST(:ttl AS FLOAT8)
WHERE id = :id AND claim_token = :claim AND state = 'pending' AND claim_owner IS NOT NULL
RETURNING claim_expires_at + :skew;

-- name: record_parts
-- The parts of a reply posted so far: a retry (any process, after a crash too) skips them.
UPDATE replies SET platform_message_ids = :ids
WHERE id = :id AND claim_token = :claim AND state = 'pending'
RETURNING id;

-- name: mark_sent
-- Every mark is fenced by the claim token: a deliverer whose claim was taken changes nothing.
UPDATE replies
SET state = 'sent', platform_message_ids = :ids, sent_at = :db_now,
    claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id AND claim_token = :claim AND state = 'pending'
RETURNING id;

-- name: take_indicator_of_reply
-- In mark_sent's transaction: the reply's conversation's indicator comes down with it (not with
-- a notice: the pending burst it shows for is still unanswered).
DELETE FROM indicators
WHERE conversation_id = (SELECT conversation_id FROM replies WHERE id = :id AND kind != 'notice')
RETURNING platform_message_id;

-- name: record_indicator
-- Recorded before it is shown, and only while the burst is unanswered and nothing is recorded yet.
INSERT INTO indicators (conversation_id, platform_message_id)
SELECT id, CAST(:at AS TEXT) FROM conversations WHERE id = :cid AND answered_version < :version
ON CONFLICT (conversation_id) DO NOTHING
RETURNING conversation_id;

-- name: take_indicator
DELETE FROM indicators WHERE conversation_id = :cid RETURNING platform_message_id;

-- name: mark_retry
-- A failure counts as an attempt unless it was the platform pacing us (:counts false: a rate
-- limit); either way the give-up horizon runs from the first one (failing_since).
UPDATE replies
SET next_attempt_at = CAST(:at AS FLOAT8) - :skew, last_error = :error, claim_owner = NULL,
    claim_expires_at = NULL,
    attempts = attempts + CASE WHEN CAST(:counts AS BOOLEAN) THEN 1 ELSE 0 END,
    failing_since = COALESCE(failing_since, CAST(:now AS FLOAT8))
WHERE id = :id AND claim_token = :claim AND state = 'pending'
RETURNING id;

-- name: mark_failed
UPDATE replies
SET state = 'failed', last_error = :error, claim_owner = NULL, claim_expires_at = NULL,
    attempts = attempts + 1
WHERE id = :id AND claim_token = :claim AND state = 'pending'
RETURNING id;

-- name: requeue_failed
-- `burstbot retry`: a failed reply (one, or every one of a conversation) is pending again, due
-- now, with its failures forgotten; the last error stays for `explain`.
UPDATE replies
SET state = 'pending', attempts = 0, failing_since = NULL, next_attempt_at = :now,
    claim_owner = NULL, claim_expires_at = NULL
WHERE state = 'failed'
  AND (id = CAST(:id AS BIGINT) OR conversation_id = CAST(:cid AS TEXT))
RETURNING id, conversation_id, platform;

-- name: reply_state
SELECT state FROM replies WHERE id = :id;

-- inspection --------------------------------------------------------------------------------------

-- name: conversation_state
SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token, c.lease_expires_at,
       c.failed_attempts, t.due_at, t.deadline_at, t.armed_version
FROM conversations c LEFT JOIN debounce_timers t ON t.conversation_id = c.id
WHERE c.id = :cid;

-- name: replies
SELECT * FROM replies WHERE (CAST(:cid AS TEXT) IS NULL OR conversation_id = :cid) ORDER BY id;

-- name: generations
SELECT * FROM generations WHERE (CAST(:cid AS TEXT) IS NULL OR conversation_id = :cid)
ORDER BY id;

-- operator side (bot/ops/) --------------------------------------------------------------------

-- name: reset_history
UPDATE conversations SET history_floor = version WHERE id = :cid RETURNING history_floor;

-- name: add_to_counter
INSERT INTO usage_counters AS c (scope, window_start, amount, expires_at)
VALUES (:scope, :window_start, :amount, :expires_at)
ON CONFLICT (scope, window_start) DO UPDATE SET amount = c.amount + excluded.amount
RETURNING amount;

-- name: claim_counter_key
-- add_once: the first call for a key inserts its row; a concurrent one waits for that
-- transaction, then does nothing and reads the total it remembered.
INSERT INTO usage_counters (scope, window_start, amount, expires_at)
VALUES (:scope, 0, 0, :expires_at)
ON CONFLICT (scope, window_start) DO NOTHING
RETURNING amount;

-- name: remember_counter_total
UPDATE usage_counters SET amount = :amount WHERE scope = :scope AND window_start = 0;

-- name: prune_counters
DELETE FROM usage_counters WHERE expires_at < :now;

-- name: read_counter
SELECT amount FROM usage_counters WHERE scope = :scope AND window_start = :window_start;

-- name: list_conversations
-- Newest activity first; `active` keeps only conversations with something in flight.
SELECT * FROM (
    SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token,
           c.lease_expires_at, c.failed_attempts,
           t.due_at, t.deadline_at, t.armed_version,
           (SELECT COUNT(*) FROM messages m
            WHERE m.conversation_id = c.id AND m.seq > c.answered_version AND NOT m.deleted)
               AS pending_messages,
           (SELECT COUNT(*) FROM replies r WHERE r.conversation_id = c.id AND r.state = 'pending')
               AS outbox_pending,
           (SELECT COUNT(*) FROM replies r WHERE r.conversation_id = c.id AND r.state = 'failed')
               AS outbox_failed,
           COALESCE((SELECT MAX(created_at) FROM messages m WHERE m.conversation_id = c.id),
                    c.created_at) AS last_activity_at
    FROM conversations c LEFT JOIN debounce_timers t ON t.conversation_id = c.id
) AS summary
WHERE NOT CAST(:active AS BOOLEAN) OR version > answered_version OR due_at IS NOT NULL
   OR lease_owner IS NOT NULL OR outbox_pending > 0 OR outbox_failed > 0
ORDER BY last_activity_at DESC LIMIT :limit;

-- name: all_messages
SELECT * FROM messages WHERE conversation_id = :cid ORDER BY seq;

-- retention and erasure (storage/retention.py): never pending work ----------------------------

-- name: prune_messages
-- Answered messages older than the cutoff; pending input (seq above answered_version) stays.
DELETE FROM messages
WHERE created_at < :cutoff
  AND seq <= (SELECT c.answered_version FROM conversations c WHERE c.id = messages.conversation_id)
RETURNING seq;

-- name: prune_replies
-- Posted (or given up) replies; one still waiting in the outbox stays.
DELETE FROM replies WHERE created_at < :cutoff AND state != 'pending' RETURNING id;

-- name: prune_generations
DELETE FROM generations WHERE ended_at < :cutoff RETURNING id;

-- name: prune_files
-- Files fetched before the cutoff: a later burst that names one again fetches it again.
DELETE FROM attachment_files WHERE fetched_at < :cutoff RETURNING attachment_uid;

-- name: prune_blobs
-- Bytes no file outcome refers to any more.
DELETE FROM attachment_blobs
WHERE sha256 NOT IN (SELECT sha256 FROM attachment_files WHERE sha256 IS NOT NULL)
RETURNING sha256;

-- name: forget_file
DELETE FROM attachment_files WHERE attachment_uid = :uid;

-- name: user_files
-- The files on a person's messages, read before `forget_user_messages` erases their descriptions.
SELECT conversation_id, attachments FROM messages
WHERE author_id = :user AND attachments != '[]'
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform));

-- name: conversation_files
SELECT conversation_id, attachments FROM messages
WHERE conversation_id = :cid AND attachments != '[]';

-- name: forget_user_messages
-- Erased in place: the row keeps its platform id, so a redelivery is still known and dropped.
UPDATE messages SET text = '', author_name = '', author_id = '', deleted = TRUE,
                    attachments = '[]'
WHERE author_id = :user
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING seq;

-- name: forget_user_held
DELETE FROM held_messages
WHERE author_id = :user AND (CAST(:platform AS TEXT) IS NULL OR platform = :platform)
RETURNING message_uid;

-- name: forget_user_generations
-- The person's id, and the web searches run for them (queries carry what they asked).
UPDATE generations SET user_id = '', searches = '[]'
WHERE user_id = :user
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING id;

-- name: forget_user_fence
-- First, as for a conversation (`forget_conversation_fence`): an answer under way where the
-- person spoke may quote them, so its lease loses the fence and its commit is discarded. The
-- others' input is still owed an answer: `forget_user_rearm`, after the erase, makes it due.
UPDATE conversations
SET lease_token = lease_token + 1, lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner IS NOT NULL
  AND id IN (SELECT conversation_id FROM messages WHERE author_id = :user)
  AND (CAST(:platform AS TEXT) IS NULL OR platform = :platform)
RETURNING id;

-- name: forget_user_rearm
-- Due now, as a burst at its cap; a timer still armed is left to `restore_timer` (its window).
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
SELECT id, :db_now, :db_now, :db_now, version FROM conversations
WHERE id = :cid AND version > answered_version
ON CONFLICT (conversation_id) DO NOTHING;

-- name: forget_conversation_messages
UPDATE messages SET text = '', author_name = '', author_id = '', deleted = TRUE,
                    attachments = '[]'
WHERE conversation_id = :cid AND (text != '' OR author_id != '' OR attachments != '[]')
RETURNING seq;

-- name: forget_conversation_replies
-- A reply still waiting in the outbox is posted first (erasing it would post an empty message).
UPDATE replies SET text = '' WHERE conversation_id = :cid AND state != 'pending' AND text != ''
RETURNING id;

-- name: forget_conversation_held
DELETE FROM held_messages WHERE conversation_id = :cid RETURNING message_uid;

-- name: forget_conversation_generations
-- The web searches run for it (queries carry what people asked); counts and costs stay.
UPDATE generations SET searches = '[]' WHERE conversation_id = :cid AND searches != '[]'
RETURNING id;

-- name: forget_conversation_fence
-- First, so a generation still running for it cannot commit what the erase removes: its lease
-- loses the fence, the input it answered counts as answered (its text is gone, nothing is left
-- to answer), and its timer goes (`forget_conversation_timer`).
UPDATE conversations
SET lease_token = lease_token + 1, lease_owner = NULL, lease_expires_at = NULL,
    answered_version = version, failed_attempts = 0
WHERE id = :cid;

-- name: forget_conversation_timer
DELETE FROM debounce_timers WHERE conversation_id = :cid;

-- name: forget_conversation_notes
DELETE FROM conversation_notes WHERE conversation_id = :cid;

-- name: forget_conversation_actions
-- Tool arguments and results carry what people asked and what the tools found; the record of
-- the call (its key, tool and times) stays, so an erased call is still never repeated. A call
-- that asked loses its saved continuation (the model's words) too: one still waiting can no
-- longer be decided (superseded, its key moved aside, so a new answer may ask again).
UPDATE actions SET arguments = '{}', result = CASE WHEN result IS NULL THEN NULL ELSE '' END,
    resume = NULL, asked_by = CASE WHEN asked_by IS NULL THEN NULL ELSE '' END,
    decided_by = CASE WHEN decided_by IS NULL THEN NULL ELSE '' END,
    approval = CASE WHEN approval = 'waiting' THEN 'superseded' ELSE approval END,
    idempotency_key = CASE WHEN approval = 'waiting'
        THEN idempotency_key || '/superseded/' || CAST(card_reply_id AS TEXT)
        ELSE idempotency_key END
WHERE conversation_id = :cid AND (arguments != '{}' OR result != '' OR resume IS NOT NULL
                                  OR asked_by != '' OR decided_by != '')
RETURNING idempotency_key;

-- name: forget_user_actions
-- As for a conversation; `asked_by` is their display name (the card asked for them).
UPDATE actions SET arguments = '{}', result = CASE WHEN result IS NULL THEN NULL ELSE '' END,
    resume = NULL, asked_by = CASE WHEN asked_by IS NULL THEN NULL ELSE '' END,
    approval = CASE WHEN approval = 'waiting' THEN 'superseded' ELSE approval END,
    idempotency_key = CASE WHEN approval = 'waiting'
        THEN idempotency_key || '/superseded/' || CAST(card_reply_id AS TEXT)
        ELSE idempotency_key END
WHERE user_id = :user
  AND (arguments != '{}' OR result != '' OR resume IS NOT NULL OR asked_by != '')
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING idempotency_key;

-- name: forget_user_decisions
-- First, while their clicks still name them: an Approve or Deny they decided keeps the decision
-- and loses their display name (`decided_by` holds the name, not the id).
UPDATE actions SET decided_by = ''
WHERE decided_by != '' AND EXISTS (
    SELECT 1 FROM clicks k
    WHERE k.conversation_id = actions.conversation_id AND k.kind IN ('approve', 'deny')
      AND k.clicker_id = :user AND k.clicker_name = actions.decided_by)
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING idempotency_key;

-- name: forget_user_cards
-- The approval cards that asked for them or that they decided, and the edits that end them: a
-- card repeats the call's arguments and names for whom it asked and who decided. One still
-- waiting in the outbox is posted first (as a reply is; forget again afterwards).
UPDATE replies SET text = ''
WHERE kind IN ('card', 'card_outcome') AND state != 'pending' AND text != ''
  AND EXISTS (
      SELECT 1 FROM actions a
      WHERE a.conversation_id = replies.conversation_id
        AND (replies.id = a.card_reply_id
             OR replies.draft_key = 'r' || CAST(a.card_reply_id AS TEXT))
        AND (a.user_id = :user OR EXISTS (
            SELECT 1 FROM clicks k
            WHERE k.conversation_id = a.conversation_id AND k.kind IN ('approve', 'deny')
              AND k.clicker_id = :user AND k.target = CAST(a.card_reply_id AS TEXT))))
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING id;

-- name: forget_user_votes
-- Their 👍/👎 votes go (the totals count the votes standing: one erased is no longer counted).
DELETE FROM votes WHERE voter_id = :user
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING reply_id;

-- name: forget_user_stopped_answers
-- Also while their clicks still name them: an answer they stopped ends "(stopped by NAME)"
-- (bot/core/clicks.py, `stopped_text`); it keeps "(stopped)".
UPDATE replies SET text = replace(replies.text, '_(stopped by ' || k.clicker_name || ')_',
                                  '_(stopped)_')
FROM clicks k
WHERE k.conversation_id = replies.conversation_id AND k.kind = 'stop' AND k.clicker_id = :user
  AND k.clicker_name != '' AND replies.kind = 'answer'
  AND replace(replies.text, '_(stopped by ' || k.clicker_name || ')_', '') != replies.text
  AND (CAST(:platform AS TEXT) IS NULL
       OR replies.conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING replies.id;

-- name: forget_user_stopped_generations
UPDATE generations SET error = 'stopped'
FROM clicks k
WHERE k.conversation_id = generations.conversation_id AND k.kind = 'stop'
  AND k.clicker_id = :user AND k.clicker_name != '' AND generations.outcome = 'stopped'
  AND generations.error = 'stopped by ' || k.clicker_name
  AND (CAST(:platform AS TEXT) IS NULL
       OR generations.conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING generations.id;

-- name: forget_user_clicks
-- Erased in place: the row keeps its platform click id and decision, so a redelivered press is
-- still a duplicate (G16) and cannot store the name, or cast the vote, again.
UPDATE clicks SET clicker_id = '', clicker_name = ''
WHERE clicker_id = :user
  AND (CAST(:platform AS TEXT) IS NULL
       OR conversation_id IN (SELECT id FROM conversations WHERE platform = :platform))
RETURNING click_id;

-- name: forget_conversation_votes
DELETE FROM votes WHERE conversation_id = :cid RETURNING reply_id;

-- name: forget_conversation_clicks
-- In place, as for a person (`forget_user_clicks`).
UPDATE clicks SET clicker_id = '', clicker_name = ''
WHERE conversation_id = :cid AND (clicker_id != '' OR clicker_name != '')
RETURNING click_id;

-- name: prune_votes
-- The votes of answers whose reply row is gone (this sweep's `prune_replies`, or earlier).
DELETE FROM votes WHERE reply_id NOT IN (SELECT id FROM replies) RETURNING reply_id;

-- name: prune_clicks
-- Clicks older than the cutoff, but never a conversation's decided stop still pending.
DELETE FROM clicks
WHERE clicked_at < :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM conversations c
      WHERE c.id = clicks.conversation_id AND clicks.kind = 'stop'
        AND clicks.version = c.stop_version AND c.stop_version > c.answered_version)
RETURNING click_id;

-- tool actions (storage/actions.py) -------------------------------------------------------------
-- name: begin_action
-- Fenced like a reply: recorded only while the lease token is current; a key the burst already
-- recorded (an earlier generation made this call) inserts nothing.
INSERT INTO actions (conversation_id, idempotency_key, from_version, to_version, lease_token,
                     server, tool, arguments, read_only, tool_use_id, user_id, started_at, ordinal)
SELECT :cid, :key, :from_version, :to_version, :token, :server, :tool, :arguments, :read_only,
       :tool_use_id, :user_id, :started_at,
       (SELECT COUNT(*) FROM actions WHERE conversation_id = :cid)
FROM conversations WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
ON CONFLICT (conversation_id, idempotency_key) DO NOTHING
RETURNING idempotency_key;

-- name: action
SELECT * FROM actions WHERE conversation_id = :cid AND idempotency_key = :key;

-- name: finish_action
-- A result is written once: a call's record with a result never changes.
UPDATE actions SET finished_at = :now, result = :result, failed = :failed
WHERE conversation_id = :cid AND idempotency_key = :key AND finished_at IS NULL
RETURNING idempotency_key;

-- name: actions
SELECT * FROM actions
WHERE conversation_id = :cid
  AND (CAST(:from_version AS BIGINT) IS NULL OR from_version = :from_version)
ORDER BY started_at, ordinal;

-- name: actions_since
SELECT * FROM actions WHERE started_at >= :since ORDER BY started_at, ordinal;

-- name: felt_waits
-- The operator page's felt wait: per answer posted since :since, from its burst's last message
-- to the first text people saw (the streamed draft the reply finished, else its post).
SELECT COALESCE(r.draft_created_at, r.sent_at) - m.created_at AS wait
FROM replies r
JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq = r.covers_to_version
WHERE r.kind = 'answer' AND r.state = 'sent' AND r.created_at >= :since
ORDER BY r.id;

-- name: backlog
-- For the gauges: replies waiting in the outbox, and the oldest unanswered message's arrival;
-- replies that failed for good (waiting for `burstbot retry`).
SELECT (SELECT COUNT(*) FROM replies WHERE state = 'pending') AS outbox_depth,
       (SELECT MIN(m.created_at) FROM conversations c
        JOIN messages m ON m.conversation_id = c.id AND m.seq > c.answered_version
        WHERE c.version > c.answered_version AND NOT m.deleted) AS oldest_pending_at,
       (SELECT COUNT(*) FROM replies WHERE state = 'failed') AS outbox_failed;

-- name: unsent_replies
SELECT COUNT(*) FROM replies WHERE conversation_id = :cid AND state = 'pending';

-- what front ends remember (bot/core/catch_up.py) -----------------------------------------------

-- name: thread_status
-- A thread is ours when we hold a conversation for it; otherwise a lookup decided (NULL: never).
SELECT CASE WHEN EXISTS (SELECT 1 FROM conversations WHERE id = :cid) THEN TRUE
            ELSE (SELECT ours FROM known_threads WHERE conversation_id = :cid) END;

-- name: remember_thread
INSERT INTO known_threads (conversation_id, ours, decided_at) VALUES (:cid, :ours, :now)
ON CONFLICT (conversation_id) DO UPDATE SET ours = excluded.ours, decided_at = excluded.decided_at;

-- name: hold_message
INSERT INTO held_messages (message_uid, conversation_id, platform, message_id, author_id,
                           author_name, text, held_at, attachments)
VALUES (:uid, :cid, :platform, :message_id, :author_id, :author_name, :text, :db_now,
        :attachments)
ON CONFLICT (message_uid) DO NOTHING;

-- name: held_messages
SELECT conversation_id, message_id, author_id, author_name, text, attachments FROM held_messages
WHERE platform = :platform ORDER BY held_at, message_uid LIMIT :limit;

-- name: unhold_message
DELETE FROM held_messages WHERE message_uid = :uid;

-- name: catch_up_points
-- Every conversation of a platform, however long quiet, most recently active first, with the
-- platform id of its newest message stored before :before (NULL: none; such a conversation was
-- first seen after the cut-off and counts as the most recent). Catch-up fetches what came after.
SELECT id, message_id FROM (
  SELECT c.id,
         (SELECT m.message_id FROM messages m
          WHERE m.conversation_id = c.id AND m.created_at < CAST(:before AS FLOAT8) - :skew
          ORDER BY m.seq DESC LIMIT 1) AS message_id,
         (SELECT MAX(m.created_at) FROM messages m
          WHERE m.conversation_id = c.id AND m.created_at < CAST(:before AS FLOAT8) - :skew)
          AS active_at
  FROM conversations c
  WHERE c.platform = :platform
) known
ORDER BY COALESCE(active_at, CAST(:before AS FLOAT8) - :skew) DESC, id;

-- name: stored_in
-- The conversation a platform message is stored in (the dedupe key's row), if it is.
SELECT conversation_id FROM messages WHERE message_uid = :uid;

-- attachments (bot/core/attachments.py) -----------------------------------------------------------

-- name: attachment_file
SELECT f.sha256, f.note, b.content
FROM attachment_files f LEFT JOIN attachment_blobs b ON b.sha256 = f.sha256
WHERE f.attachment_uid = :uid;

-- name: keep_attachment_blob
INSERT INTO attachment_blobs (sha256, content, stored_at) VALUES (:sha256, :content, :now)
ON CONFLICT (sha256) DO NOTHING;

-- name: keep_attachment_file
-- The first outcome recorded for a file wins: it is fetched at most once.
INSERT INTO attachment_files (attachment_uid, sha256, note, fetched_at)
VALUES (:uid, :sha256, :note, :now)
ON CONFLICT (attachment_uid) DO NOTHING;

-- streaming: a conversation's draft ---------------------------------------------------------------

-- name: draft
SELECT draft_key, draft_message_id, draft_created_at, draft_reply_to
FROM conversations WHERE id = :cid AND draft_key IS NOT NULL;

-- name: record_draft
-- Under the lease: first the key with its creation time (before the first post), then the key with
-- the message id; the first record's creation time and replied-to message stay.
UPDATE conversations SET draft_key = :key, draft_message_id = :message_id,
    draft_created_at = COALESCE(draft_created_at, :created_at),
    draft_reply_to = COALESCE(draft_reply_to, :reply_to)
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
  AND (draft_key IS NULL OR draft_key = :key)
RETURNING id;

-- name: drop_draft
UPDATE conversations SET draft_key = NULL, draft_message_id = NULL, draft_created_at = NULL,
    draft_reply_to = NULL
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL AND draft_key = :key
RETURNING id;

-- name: hand_draft_to_reply
-- In the commit's transaction: the reply finishes the conversation's draft (its first part edits
-- that message), and the conversation's next burst starts a draft of its own.
UPDATE replies
SET (draft_key, draft_message_id, draft_created_at, draft_reply_to) =
    (SELECT draft_key, draft_message_id, draft_created_at, draft_reply_to FROM conversations
     WHERE id = :cid)
WHERE id = :id
RETURNING *;

-- name: clear_draft
UPDATE conversations SET draft_key = NULL, draft_message_id = NULL, draft_created_at = NULL,
    draft_reply_to = NULL
WHERE id = :cid;

-- what front ends note about a conversation (bot/core/notes.py) -----------------------------------

-- name: note
SELECT value FROM conversation_notes WHERE conversation_id = :cid AND name = :name;

-- name: put_note
-- Replaces a note, unless :replace is false (`add_note`): then only the first of two deliveries of
-- one event inserts (and gets a row back).
INSERT INTO conversation_notes (conversation_id, name, value, noted_at)
VALUES (:cid, :name, :value, :db_now)
ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value,
    noted_at = excluded.noted_at WHERE CAST(:replace AS BOOLEAN)
RETURNING name;

-- name: noted
-- Every conversation under :under (a prefix of its id: a platform's workspace) that carries the
-- note :name, most recently noted first. Read once per catch-up pass (Slack's agent DMs).
SELECT conversation_id FROM conversation_notes
WHERE name = :name AND substr(conversation_id, 1, length(CAST(:under AS TEXT))) = :under
ORDER BY noted_at DESC, conversation_id;

-- name: swap_note
-- Replaces a note only while it still holds :expected (`swap_note`): of two processes that read the
-- same value and each replace it, one gets a row back.
UPDATE conversation_notes SET value = :value, noted_at = :db_now
WHERE conversation_id = :cid AND name = :name AND value = :expected
RETURNING name;

-- name: migration_1
-- The first two migrations are written in PostgreSQL's type names, and SQLite gets its own names
-- for them (storage/sqlite.py's FIRST_SCHEMA_TYPES), as its databases always had. Later migrations
-- use names both dialects read. (SQLite splits a migration at semicolons: none in its comments.)
CREATE TABLE conversations (
    id                TEXT PRIMARY KEY,
    platform          TEXT NOT NULL,
    version           BIGINT NOT NULL DEFAULT 0,
    answered_version  BIGINT NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_token       BIGINT NOT NULL DEFAULT 0,
    lease_expires_at  DOUBLE PRECISION,
    failed_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at        DOUBLE PRECISION NOT NULL
);
CREATE TABLE messages (
    conversation_id   TEXT NOT NULL REFERENCES conversations(id),
    seq               BIGINT NOT NULL,
    message_uid       TEXT NOT NULL UNIQUE,
    message_id        TEXT NOT NULL,
    author_id         TEXT NOT NULL,
    author_name       TEXT NOT NULL,
    text              TEXT NOT NULL,
    created_at        DOUBLE PRECISION NOT NULL,
    edited_at         DOUBLE PRECISION,
    deleted           BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE debounce_timers (
    conversation_id   TEXT PRIMARY KEY REFERENCES conversations(id),
    due_at            DOUBLE PRECISION NOT NULL,
    deadline_at       DOUBLE PRECISION NOT NULL,
    quiet_until       DOUBLE PRECISION NOT NULL,
    armed_version     BIGINT NOT NULL
);
CREATE INDEX debounce_timers_due ON debounce_timers(due_at);
CREATE TABLE replies (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id     TEXT NOT NULL REFERENCES conversations(id),
    platform            TEXT NOT NULL,
    covers_from_version BIGINT NOT NULL,
    covers_to_version   BIGINT NOT NULL,
    seen_version        BIGINT NOT NULL,
    reply_to_message_id TEXT,
    text                TEXT NOT NULL,
    kind                TEXT NOT NULL DEFAULT 'answer',
    state               TEXT NOT NULL DEFAULT 'pending',
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     DOUBLE PRECISION NOT NULL,
    claim_owner         TEXT,
    claim_expires_at    DOUBLE PRECISION,
    platform_message_ids TEXT[] NOT NULL DEFAULT '{}',
    last_error          TEXT,
    created_at          DOUBLE PRECISION NOT NULL,
    sent_at             DOUBLE PRECISION,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, covers_to_version)
);
CREATE INDEX replies_pending ON replies(next_attempt_at) WHERE state = 'pending';
CREATE TABLE generations (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id    TEXT NOT NULL,
    lease_token        BIGINT NOT NULL,
    from_version       BIGINT NOT NULL,
    to_version         BIGINT NOT NULL,
    started_at         DOUBLE PRECISION NOT NULL,
    ended_at           DOUBLE PRECISION NOT NULL,
    outcome            TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    error              TEXT
);
CREATE INDEX generations_conversation ON generations(conversation_id, id);

-- name: migration_2
-- /reset (history_floor: prompts only see turns after it) and the cost guards' counters.
ALTER TABLE conversations ADD COLUMN history_floor BIGINT NOT NULL DEFAULT 0;
CREATE TABLE usage_counters (
    scope             TEXT NOT NULL,
    window_start      BIGINT NOT NULL,
    amount            BIGINT NOT NULL DEFAULT 0,
    expires_at        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, window_start)
);
CREATE INDEX usage_counters_expiry ON usage_counters(expires_at);

-- name: migration_3
-- Delivery is fenced like generation: every claim bumps claim_token, and renewals and marks are
-- conditional on it. A conversation's replies are claimed in commit order, one at a time (G9).
ALTER TABLE replies ADD COLUMN claim_token BIGINT NOT NULL DEFAULT 0;
CREATE INDEX replies_pending_in_order ON replies(conversation_id, id) WHERE state = 'pending';

-- name: migration_4
-- How each message arrived (catch-up, held for a thread lookup), the arrival index catch-up reads,
-- thread lookups remembered, and messages held until their thread is decided.
ALTER TABLE messages ADD COLUMN via TEXT NOT NULL DEFAULT '';
CREATE INDEX messages_arrival ON messages(created_at);
CREATE TABLE known_threads (
    conversation_id   TEXT PRIMARY KEY,
    ours              BOOLEAN NOT NULL,
    decided_at        FLOAT8 NOT NULL
);
CREATE TABLE held_messages (
    message_uid       TEXT PRIMARY KEY,
    conversation_id   TEXT NOT NULL,
    platform          TEXT NOT NULL,
    message_id        TEXT NOT NULL,
    author_id         TEXT NOT NULL,
    author_name       TEXT NOT NULL,
    text              TEXT NOT NULL,
    held_at           FLOAT8 NOT NULL
);
CREATE INDEX held_messages_platform ON held_messages(platform, held_at);

-- name: migration_5
-- Files on messages: their descriptions stored with the message (a JSON list, held messages too),
-- and what each file's one fetch gave: its bytes, kept once per SHA-256, or why there are none.
-- SQLite keeps a blob as given whatever the declared type, so BYTEA serves both dialects.
ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
ALTER TABLE held_messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
CREATE TABLE attachment_blobs (
    sha256            TEXT PRIMARY KEY,
    content           BYTEA NOT NULL,
    stored_at         FLOAT8 NOT NULL
);
CREATE TABLE attachment_files (
    attachment_uid    TEXT PRIMARY KEY,
    sha256            TEXT REFERENCES attachment_blobs(sha256),
    note              TEXT,
    fetched_at        FLOAT8 NOT NULL
);

-- name: migration_6
-- Usage reports (`burstbot usage`): the model that answered each generation, and the user it
-- answered (the author of the burst's last message, whom the reply answers).
ALTER TABLE generations ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE generations ADD COLUMN user_id TEXT NOT NULL DEFAULT '';

-- name: migration_7
-- Streaming: the draft a conversation's generations stream into (kept across superseded
-- generations and takeovers, its key being the first post's idempotency key), and the draft a
-- committed reply finishes.
ALTER TABLE conversations ADD COLUMN draft_key TEXT;
ALTER TABLE conversations ADD COLUMN draft_message_id TEXT;
ALTER TABLE replies ADD COLUMN draft_key TEXT;
ALTER TABLE replies ADD COLUMN draft_message_id TEXT;

-- name: migration_8
-- The thinking indicator shown on a conversation, recorded before it is shown and deleted by
-- whoever takes it down: the process posting the reply does, even when another process (or one
-- killed since) turned it on.
CREATE TABLE indicators (
    conversation_id TEXT PRIMARY KEY,
    platform_message_id TEXT NOT NULL
);

-- name: migration_9
-- A draft's creation time (taken before its first post: a look-up for a post whose outcome is
-- unknown starts there) and the message its first post answered (Discord finds a draft past its
-- nonce window by it), on the conversation and on the reply that finishes the draft.
ALTER TABLE conversations ADD COLUMN draft_created_at FLOAT8;
ALTER TABLE conversations ADD COLUMN draft_reply_to TEXT;
ALTER TABLE replies ADD COLUMN draft_created_at FLOAT8;
ALTER TABLE replies ADD COLUMN draft_reply_to TEXT;

-- name: migration_10
-- Delivery retries a transient failure for a horizon measured from the reply's first failure;
-- NULL until it fails (and again after `burstbot retry`).
ALTER TABLE replies ADD COLUMN failing_since FLOAT8;

-- name: migration_11
-- Web search: the searches each generation was billed for (priced per search on top of the
-- tokens), and what it searched (a JSON list of query, result count and error, for `explain`).
ALTER TABLE generations ADD COLUMN web_searches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN searches TEXT NOT NULL DEFAULT '[]';

-- name: migration_12
-- Notes front ends keep per conversation (Slack's assistant threads: opened, the channel the
-- person is viewing, the title set), which may exist before the conversation's first message.
CREATE TABLE conversation_notes (
    conversation_id   TEXT NOT NULL,
    name              TEXT NOT NULL,
    value             TEXT NOT NULL,
    noted_at          FLOAT8 NOT NULL,
    PRIMARY KEY (conversation_id, name)
);

-- name: migration_13
-- Tool calls as durable actions (docs/tools.md): recorded, fenced by the lease token, before the
-- call runs, under the idempotency key derived from the burst and the call, and the result once it
-- returns. A later generation of the burst (`from_version`) is given them instead of repeating.
CREATE TABLE actions (
    conversation_id   TEXT NOT NULL,
    idempotency_key   TEXT NOT NULL,
    from_version      BIGINT NOT NULL,
    to_version        BIGINT NOT NULL,
    lease_token       BIGINT NOT NULL,
    server            TEXT NOT NULL,
    tool              TEXT NOT NULL,
    arguments         TEXT NOT NULL,
    read_only         BOOLEAN NOT NULL,
    tool_use_id       TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    started_at        FLOAT8 NOT NULL,
    finished_at       FLOAT8,
    result            TEXT,
    failed            BOOLEAN NOT NULL DEFAULT FALSE,
    ordinal           BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, idempotency_key)
);
CREATE INDEX actions_burst ON actions(conversation_id, from_version, started_at);
CREATE INDEX actions_user ON actions(user_id);

-- name: migration_14
-- The adaptive quiet window: a few numbers per person (their messages, how many were quick
-- follow-ups, the weighted mean and variance of those gaps' logarithm, their last message), and
-- why each message's window was what it was (`explain`).
CREATE TABLE author_rhythm (
    author_uid        TEXT PRIMARY KEY,
    messages          INTEGER NOT NULL,
    follow_ups        INTEGER NOT NULL,
    mean_log_gap      FLOAT8 NOT NULL,
    var_log_gap       FLOAT8 NOT NULL,
    last_at           FLOAT8 NOT NULL,
    last_conversation TEXT NOT NULL
);
ALTER TABLE messages ADD COLUMN quiet_reason TEXT;

-- name: migration_15
-- Speculation: a timer may be due early, at start_at (before its window closes at due_at), for a
-- generation that holds everything visible, and its commit, until the close. The scheduler finds
-- the earliest early starts through their own (partial) index.
ALTER TABLE debounce_timers ADD COLUMN start_at FLOAT8;
CREATE INDEX debounce_timers_start ON debounce_timers(start_at) WHERE start_at IS NOT NULL;

-- name: migration_16
-- Slack installations (one per workspace an "Add to Slack" install reached), their tokens
-- encrypted by the Slack adapter before they get here (the store never sees one in the clear),
-- `token_version` bumped by every save or refresh, and the claim that lets one process refresh an
-- expiring token. Beside them, the OAuth flow's single-use states.
CREATE TABLE slack_installations (
    team_id           TEXT PRIMARY KEY,
    enterprise_id     TEXT NOT NULL,
    team_name         TEXT NOT NULL,
    app_id            TEXT NOT NULL,
    bot_user_id       TEXT NOT NULL,
    bot_id            TEXT NOT NULL,
    bot_scopes        TEXT NOT NULL,
    installer_id      TEXT NOT NULL,
    bot_token         TEXT NOT NULL,
    refresh_token     TEXT,
    expires_at        FLOAT8,
    installed_at      FLOAT8 NOT NULL,
    token_version     BIGINT NOT NULL DEFAULT 1,
    refresh_owner     TEXT,
    refresh_until     FLOAT8
);
CREATE TABLE oauth_states (
    state             TEXT PRIMARY KEY,
    expires_at        FLOAT8 NOT NULL
);

-- name: migration_17
-- Clicks (stop now, votes and approvals later): one row per platform click id, what it named and
-- how it was decided, and a conversation's decided stop of its pending burst (`stop_version`).
CREATE TABLE clicks (
    click_id          TEXT PRIMARY KEY,
    conversation_id   TEXT NOT NULL,
    kind              TEXT NOT NULL,
    target            TEXT NOT NULL,
    clicker_id        TEXT NOT NULL,
    clicker_name      TEXT NOT NULL,
    clicked_at        FLOAT8 NOT NULL,
    outcome           TEXT,
    version           BIGINT
);
CREATE INDEX clicks_conversation ON clicks(conversation_id, clicked_at);
ALTER TABLE conversations ADD COLUMN stop_version BIGINT;

-- name: migration_18
-- Votes (👍/👎 on answers, bot/core/votes.py): whether an answer carries the buttons and which
-- model wrote it, and one vote per person per answer with the platform's time of the press it
-- came from (a newer press replaces it, an older one does not).
ALTER TABLE replies ADD COLUMN feedback BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE replies ADD COLUMN model TEXT NOT NULL DEFAULT '';
CREATE TABLE votes (
    reply_id          BIGINT NOT NULL,
    voter_id          TEXT NOT NULL,
    conversation_id   TEXT NOT NULL,
    voter_name        TEXT NOT NULL,
    value             TEXT NOT NULL,
    voted_at          FLOAT8 NOT NULL,
    click_id          TEXT NOT NULL,
    model             TEXT NOT NULL,
    PRIMARY KEY (reply_id, voter_id)
);
CREATE INDEX votes_conversation ON votes(conversation_id, voted_at);
CREATE INDEX votes_time ON votes(voted_at);

-- name: migration_19
-- Approvals (docs/controls.md#approve-and-deny): a call that must ask is recorded as an action
-- awaiting approval (`approval`: NULL when none is needed, else waiting, approved, denied,
-- expired, superseded or running), until when (database clock), who decided, the card that asks
-- (an outbox row of kind `card`) and the generation's saved continuation (`resume`, JSON).
ALTER TABLE actions ADD COLUMN approval TEXT;
ALTER TABLE actions ADD COLUMN approval_expires_at FLOAT8;
ALTER TABLE actions ADD COLUMN decided_by TEXT;
ALTER TABLE actions ADD COLUMN asked_by TEXT;
ALTER TABLE actions ADD COLUMN card_reply_id BIGINT;
ALTER TABLE actions ADD COLUMN resume TEXT;
CREATE INDEX actions_card ON actions(conversation_id, card_reply_id);

-- name: migration_20
-- The Messages API's rate limits as the processes sharing one API key last heard them
-- (bot/core/admission.py): one row per key's name (`scope`, never the key), its state as JSON,
-- stamped on the database's clock and replaced by compare-and-swap on `version`.
CREATE TABLE api_limits (
    scope             TEXT PRIMARY KEY,
    state             TEXT NOT NULL,
    saved_at          FLOAT8 NOT NULL,
    version           BIGINT NOT NULL
);
-- How long a generation's burst waited for the API's capacity before it started, and for what
-- (`burstbot explain`).
ALTER TABLE generations ADD COLUMN waited FLOAT8 NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN waited_for TEXT NOT NULL DEFAULT '';

-- name: migration_21
-- Traces (bot/ops/traces.py): the pending burst's W3C trace context, set when its first message
-- is stored and cleared when it is answered, so a process that takes the burst over joins its
-- trace.
ALTER TABLE conversations ADD COLUMN trace_context TEXT;

-- name: migration_22
-- The processes running the bot (bot/core/processes.py): one row per owner name (the name on its
-- leases and claims), written when it starts, stamped seen on the database's clock every few
-- seconds and deleted when it stops cleanly (a row not seen for a day is pruned).
CREATE TABLE processes (
    owner             TEXT PRIMARY KEY,
    host              TEXT NOT NULL,
    pid               BIGINT NOT NULL,
    version           TEXT NOT NULL,
    started_at        FLOAT8 NOT NULL,
    seen_at           FLOAT8 NOT NULL
);

-- the API's limits (storage/api_limits.py) --------------------------------------------------------

-- name: api_limits
-- `age`: how long ago it was saved, on the database's clock (only that difference crosses, G12).
SELECT state, CAST(:db_now AS FLOAT8) - saved_at AS age, version FROM api_limits
WHERE scope = :scope;

-- name: all_api_limits
SELECT scope, state, CAST(:db_now AS FLOAT8) - saved_at AS age, version FROM api_limits
ORDER BY scope;

-- name: insert_api_limits
INSERT INTO api_limits (scope, state, saved_at, version) VALUES (:scope, :state, :db_now, 1)
ON CONFLICT (scope) DO NOTHING
RETURNING version;

-- name: save_api_limits
UPDATE api_limits SET state = :state, saved_at = :db_now, version = version + 1
WHERE scope = :scope AND version = :version
RETURNING version;

-- fair shares (storage/shares.py) -----------------------------------------------------------------

-- name: shares
-- The conversations some process generates now (a live lease, whichever process holds it) and
-- those due to start, each with the person its burst counts against (the author of its latest
-- message, by the primary key). Read from the armed timers, not every conversation: a
-- conversation is leased only from its due timer, which waits (held) until its answer drops it.
SELECT t.conversation_id,
       COALESCE((SELECT m.author_id FROM messages m WHERE m.conversation_id = t.conversation_id
                 ORDER BY m.seq DESC LIMIT 1), '') AS person,
       CASE WHEN c.lease_owner IS NOT NULL AND c.lease_expires_at > CAST(:db_now AS FLOAT8)
            THEN 1 ELSE 0 END AS generating
FROM debounce_timers t JOIN conversations c ON c.id = t.conversation_id
WHERE (c.lease_owner IS NOT NULL AND c.lease_expires_at > CAST(:db_now AS FLOAT8))
   OR t.due_at <= CAST(:db_now AS FLOAT8) OR t.start_at <= CAST(:db_now AS FLOAT8);

-- the processes running the bot (storage/processes.py) -------------------------------------------

-- name: see_process
-- The first refresh writes the row (started now); every later one only moves `seen_at`.
INSERT INTO processes (owner, host, pid, version, started_at, seen_at)
VALUES (:owner, :host, :pid, :version, :db_now, :db_now)
ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at;

-- name: forget_process
DELETE FROM processes WHERE owner = :owner RETURNING owner;

-- name: prune_processes
DELETE FROM processes
WHERE seen_at < CAST(:db_now AS FLOAT8) - CAST(:unseen_for AS FLOAT8)
RETURNING owner;

-- name: all_processes
-- On the caller's clock: only the distance from its `now` crosses (G12).
SELECT owner, host, pid, version, started_at + :skew AS started_at, seen_at + :skew AS seen_at
FROM processes ORDER BY owner;

-- clicks (storage/clicks.py) ---------------------------------------------------------------------

-- name: insert_click
-- Stored once per platform click id: a second delivery inserts nothing (and returns no row).
INSERT INTO clicks (click_id, conversation_id, kind, target, clicker_id, clicker_name, clicked_at)
VALUES (:click_id, :cid, :kind, :target, :clicker_id, :clicker_name, :now)
ON CONFLICT (click_id) DO NOTHING
RETURNING click_id;

-- name: decide_stop
-- The stop's compare-and-swap: it applies only while what it names is still the pending burst's
-- (its draft, or one of its messages: an agent session's stop names the message its processing
-- status went on for), the burst is unanswered and not stopped already, and the clicker wrote
-- part of the burst (or is an admin). A stop is input: the version moves (the supersede path
-- cancels the generation) and the stop covers everything pending up to it.
UPDATE conversations SET version = version + 1, stop_version = version + 1
WHERE id = :cid AND answered_version < version
  AND (draft_key = :target OR EXISTS (
      SELECT 1 FROM messages t
      WHERE t.conversation_id = :cid AND t.message_id = :target AND t.seq > answered_version))
  AND COALESCE(stop_version, 0) <= answered_version
  AND (CAST(:admin AS BOOLEAN) OR EXISTS (
      SELECT 1 FROM messages m
      WHERE m.conversation_id = :cid AND m.seq > answered_version AND m.author_id = :clicker_id
        AND NOT m.deleted))
RETURNING version;

-- name: arm_stop_timer
-- A stopped burst is served at once (its window closed), by this process's worker or, when none
-- generates it, by whichever worker takes the lease next.
INSERT INTO debounce_timers AS t (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, :db_now, :db_now, :db_now, :version)
ON CONFLICT (conversation_id) DO UPDATE
SET due_at = LEAST(t.due_at, excluded.due_at), quiet_until = excluded.quiet_until,
    armed_version = excluded.armed_version, start_at = NULL;

-- name: stop_state
-- Why a stop did not apply (read after its compare-and-swap failed, for the clicker's notice).
SELECT version, answered_version, stop_version,
    CASE WHEN draft_key = :target OR EXISTS (
        SELECT 1 FROM messages t
        WHERE t.conversation_id = :cid AND t.message_id = :target AND t.seq > answered_version)
    THEN 1 ELSE 0 END AS names_pending
FROM conversations WHERE id = :cid;

-- name: decide_click
UPDATE clicks SET outcome = :outcome, version = :version WHERE click_id = :click_id;

-- name: pending_stop
SELECT k.version, k.clicker_id, k.clicker_name, k.clicked_at
FROM conversations c
JOIN clicks k ON k.conversation_id = c.id AND k.kind = 'stop' AND k.outcome = 'stopped'
             AND k.version = c.stop_version
WHERE c.id = :cid AND c.stop_version > c.answered_version;

-- name: clicks
SELECT * FROM clicks WHERE conversation_id = :cid ORDER BY clicked_at, click_id;

-- votes (storage/votes.py) ------------------------------------------------------------------------

-- name: cast_vote
-- The vote's compare-and-swap: only an answer of this conversation that carries the buttons takes
-- it; a person's first vote inserts, a later press replaces it only when it is newer (the
-- platform's time of the press, then the click id), so a late delivery of an older press changes
-- nothing. No row back: not cast.
INSERT INTO votes AS v (reply_id, voter_id, conversation_id, voter_name, value, voted_at,
                       click_id, model)
SELECT r.id, CAST(:clicker_id AS TEXT), r.conversation_id, CAST(:clicker_name AS TEXT),
       CAST(:value AS TEXT), CAST(:pressed_at AS FLOAT8), CAST(:click_id AS TEXT), r.model
FROM replies r
WHERE r.id = :reply_id AND r.conversation_id = :cid AND r.feedback
ON CONFLICT (reply_id, voter_id) DO UPDATE
SET value = excluded.value, voted_at = excluded.voted_at, click_id = excluded.click_id,
    voter_name = excluded.voter_name
WHERE v.voted_at < excluded.voted_at
   OR (v.voted_at = excluded.voted_at AND v.click_id < excluded.click_id)
RETURNING value;

-- name: votable_reply
-- Why a vote was not cast: its answer takes votes (an older press), or it does not.
SELECT id FROM replies WHERE id = :reply_id AND conversation_id = :cid AND feedback;

-- name: votes
SELECT * FROM votes
WHERE (CAST(:cid AS TEXT) IS NULL OR conversation_id = :cid) AND voted_at >= :since
ORDER BY voted_at, reply_id, voter_id;

-- name: vote_totals
-- The votes as they stand, per model and value (the metrics' gauge, every process's).
SELECT model, value, COUNT(*) AS votes FROM votes GROUP BY model, value ORDER BY model, value;

-- approvals (storage/approvals.py) ---------------------------------------------------------------

-- name: park_action
-- A call that must ask, recorded as waiting before anything runs: fenced by the lease token like
-- begin_action, with the continuation the answer resumes from and when the question expires.
INSERT INTO actions (conversation_id, idempotency_key, from_version, to_version, lease_token,
                     server, tool, arguments, read_only, tool_use_id, user_id, started_at, ordinal,
                     approval, approval_expires_at, asked_by, resume)
SELECT :cid, :key, :from_version, :to_version, :token, :server, :tool, :arguments, :read_only,
       :tool_use_id, :user_id, :started_at,
       (SELECT COUNT(*) FROM actions WHERE conversation_id = :cid), 'waiting',
       CAST(:db_now AS FLOAT8) + CAST(:timeout AS FLOAT8), :asked_by, :resume
FROM conversations WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
ON CONFLICT (conversation_id, idempotency_key) DO NOTHING
RETURNING approval_expires_at;

-- name: insert_card
-- A card, or the edit that ends it (`card_outcome`, naming its card in draft_key): an outbox row
-- covering no message (negative versions, like a notice), once per slot.
INSERT INTO replies (conversation_id, platform, covers_from_version, covers_to_version,
                     seen_version, reply_to_message_id, text, kind, next_attempt_at, created_at,
                     draft_key)
VALUES (:cid, :platform, :slot, :slot, :slot, :reply_to_message_id, :text, :kind, :db_now, :db_now,
        :draft_key)
ON CONFLICT (conversation_id, covers_to_version) DO NOTHING
RETURNING id;

-- name: attach_card
UPDATE actions SET card_reply_id = :card WHERE conversation_id = :cid AND idempotency_key = :key;

-- name: park_timer
-- The parked burst's timer waits for the question's expiry, unless newer input re-armed it.
UPDATE debounce_timers SET due_at = :expires_at, start_at = NULL
WHERE conversation_id = :cid AND armed_version <= :version;

-- name: lock_approval
-- Keeping a card waiting reads its action first, locked: a click deciding it meanwhile has
-- committed (its wake stands) or waits for this transaction (its wake comes after the park).
SELECT approval FROM actions WHERE conversation_id = :cid AND idempotency_key = :key
FOR UPDATE;

-- name: parked_action
-- The burst's latest action that asked: the answer resumes from its continuation.
SELECT * FROM actions
WHERE conversation_id = :cid AND from_version = :from_version AND resume IS NOT NULL
  AND approval IN ('waiting', 'approved', 'denied', 'expired', 'running')
ORDER BY ordinal DESC LIMIT 1;

-- name: decide_approval
-- The click's compare-and-swap: only while the card's action waits, has not expired, no newer
-- input came (the burst's version is the one it asked at) and the clicker may decide.
UPDATE actions SET approval = :decision, decided_by = :clicker_name
WHERE conversation_id = :cid AND card_reply_id = CAST(:card AS BIGINT) AND approval = 'waiting'
  AND approval_expires_at > CAST(:db_now AS FLOAT8)
  AND to_version = (SELECT version FROM conversations WHERE id = :cid)
  AND (CAST(:admin AS BOOLEAN) OR (CAST(:authors AS BOOLEAN) AND EXISTS (
      SELECT 1 FROM messages m
      WHERE m.conversation_id = :cid AND m.seq > actions.from_version
        AND m.seq <= actions.to_version AND m.author_id = :clicker_id AND NOT m.deleted)))
RETURNING *;

-- name: approval_state
-- Why a decision did not apply (read after its compare-and-swap failed).
SELECT a.approval, a.approval_expires_at <= CAST(:db_now AS FLOAT8) AS expired,
       a.to_version < c.version AS moved
FROM actions a JOIN conversations c ON c.id = a.conversation_id
WHERE a.conversation_id = :cid AND a.card_reply_id = CAST(:card AS BIGINT);

-- name: wake_parked
-- A decided card's burst is served now.
UPDATE debounce_timers SET due_at = LEAST(due_at, CAST(:db_now AS FLOAT8))
WHERE conversation_id = :cid;

-- name: claim_approved
-- Before the call is made: approved -> running, fenced by the lease token. After this the call
-- may have run, and is never made again.
UPDATE actions SET approval = 'running', lease_token = :token
WHERE conversation_id = :cid AND idempotency_key = :key AND approval = 'approved'
  AND EXISTS (SELECT 1 FROM conversations
              WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL)
RETURNING idempotency_key;

-- name: end_approval
-- waiting -> expired (once its time is up) or superseded (newer input), under the lease; a
-- superseded record's key moves aside so the newer burst's identical call may ask again.
UPDATE actions
SET approval = CAST(:ending AS TEXT),
    idempotency_key = CASE WHEN CAST(:ending AS TEXT) = 'superseded'
                           THEN idempotency_key || '/superseded/' || CAST(card_reply_id AS TEXT)
                           ELSE idempotency_key END
WHERE conversation_id = :cid AND idempotency_key = :key AND approval = 'waiting'
  AND (CAST(:ending AS TEXT) = 'superseded' OR approval_expires_at <= CAST(:db_now AS FLOAT8))
  AND EXISTS (SELECT 1 FROM conversations
              WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL)
RETURNING card_reply_id;

-- installations (storage/installations.py) --------------------------------------------------------

-- name: save_installation
-- A new install, or a reinstall of the same workspace (new token, same row).
INSERT INTO slack_installations (team_id, enterprise_id, team_name, app_id, bot_user_id, bot_id,
    bot_scopes, installer_id, bot_token, refresh_token, expires_at, installed_at)
VALUES (:team_id, :enterprise_id, :team_name, :app_id, :bot_user_id, :bot_id, :bot_scopes,
    :installer_id, :bot_token, :refresh_token, :expires_at, :now)
ON CONFLICT (team_id) DO UPDATE SET enterprise_id = excluded.enterprise_id,
    team_name = excluded.team_name, app_id = excluded.app_id, bot_user_id = excluded.bot_user_id,
    bot_id = excluded.bot_id, bot_scopes = excluded.bot_scopes,
    installer_id = excluded.installer_id, bot_token = excluded.bot_token,
    refresh_token = excluded.refresh_token, expires_at = excluded.expires_at,
    installed_at = excluded.installed_at,
    token_version = slack_installations.token_version + 1,
    refresh_owner = NULL, refresh_until = NULL;

-- name: installation
SELECT * FROM slack_installations WHERE team_id = :team;

-- name: all_installations
SELECT * FROM slack_installations ORDER BY installed_at, team_id;

-- name: delete_installation
DELETE FROM slack_installations WHERE team_id = :team RETURNING team_id;

-- name: claim_token_refresh
-- One process refreshes an expiring token: the one whose claim this sets (on the database's clock).
UPDATE slack_installations SET refresh_owner = :owner, refresh_until = CAST(:db_now AS FLOAT8) + CAST(:seconds AS FLOAT8)
WHERE team_id = :team AND token_version = :version
  AND (refresh_until IS NULL OR refresh_until < :db_now)
RETURNING team_id;

-- name: store_refreshed_token
UPDATE slack_installations
SET bot_token = :token, refresh_token = :refresh, expires_at = :expires_at,
    token_version = token_version + 1, refresh_owner = NULL, refresh_until = NULL
WHERE team_id = :team AND token_version = :version AND refresh_owner = :owner
RETURNING token_version;

-- name: add_oauth_state
INSERT INTO oauth_states (state, expires_at) VALUES (:state, :expires_at);

-- name: consume_oauth_state
-- Single use: of two callbacks with one state, one deletes it; an expired one is refused too.
DELETE FROM oauth_states WHERE state = :state RETURNING expires_at;

-- name: prune_oauth_states
DELETE FROM oauth_states WHERE expires_at < :now RETURNING state;

-- name: workspace_conversations
SELECT id FROM conversations WHERE id LIKE :prefix ORDER BY id;

-- name: fail_workspace_replies
-- An uninstalled workspace's replies can never be posted: failed at once, with the reason, unless
-- a deliverer holds one now (its own post fails with the same reason).
UPDATE replies SET state = 'failed', last_error = :error, claim_owner = NULL,
    claim_expires_at = NULL
WHERE conversation_id LIKE :prefix AND state = 'pending'
  AND (claim_owner IS NULL OR claim_expires_at < :db_now)
RETURNING id;
