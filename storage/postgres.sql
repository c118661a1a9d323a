-- PostgreSQL statements of burstbot, by name; the same meanings as sqlite.sql, statement by
-- statement. Times are DOUBLE PRECISION seconds since the epoch. `:name` parameters become $n.
-- Every compare-and-swap is one conditional UPDATE whose RETURNING rows the caller reads.
-- :lease_now is the time lease and claim expiry are compared against: the caller's clock, or NULL
-- for the database's own clock (statement_timestamp()), so hosts with skewed clocks agree.

-- name: migration_1
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

-- name: schema_lock
-- Two processes starting at once migrate one after the other (held until the transaction ends).
SELECT pg_advisory_xact_lock(hashtext('burstbot schema migration'));

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS burstbot_schema_version (
    version     INTEGER NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM burstbot_schema_version;

-- name: record_schema_version
INSERT INTO burstbot_schema_version (version) VALUES (:version::integer);

-- name: notify
-- A wake-up hint to other processes, delivered when the transaction commits (polling stays):
-- 'timer <due_at>', 'outbox <platform>' or 'released'.
SELECT pg_notify('burstbot_wakeup', :payload::text);

-- name: ensure_conversation
INSERT INTO conversations (id, platform, created_at) VALUES (:cid, :platform, :now::float8)
ON CONFLICT (id) DO NOTHING;

-- name: bump_version
-- Ingest bumps first: the row lock orders concurrent arrivals, so seq = the new version is unique.
UPDATE conversations SET version = version + 1 WHERE id = :cid RETURNING version;

-- name: insert_message
INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, author_name, text,
                      created_at)
VALUES (:cid, :seq::bigint, :uid, :message_id, :author_id, :author_name, :text, :now::float8)
ON CONFLICT (message_uid) DO NOTHING
RETURNING seq;

-- name: arm_timer
INSERT INTO debounce_timers AS t (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, LEAST(:now::float8 + :quiet::float8, :now::float8 + :max_wait::float8),
        :now::float8 + :max_wait::float8, :now::float8 + :quiet::float8, :version::bigint)
ON CONFLICT (conversation_id) DO UPDATE SET
    quiet_until = excluded.quiet_until,
    due_at = LEAST(excluded.quiet_until, t.deadline_at),
    armed_version = excluded.armed_version
RETURNING due_at;

-- name: find_message
-- Locks the conversation row, so an edit and a concurrent commit see each other's answered_version.
SELECT m.conversation_id, m.seq, m.deleted, c.answered_version
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.message_uid = :uid
FOR NO KEY UPDATE OF c;

-- name: edit_message
UPDATE messages SET text = :text, edited_at = :now::float8
WHERE message_uid = :uid AND NOT deleted
RETURNING seq;

-- name: delete_message
UPDATE messages SET deleted = TRUE, edited_at = :now::float8
WHERE message_uid = :uid AND NOT deleted
RETURNING seq;

-- name: flush_timer
UPDATE debounce_timers SET due_at = LEAST(due_at, :now::float8) WHERE conversation_id = :cid;

-- name: next_due_at
SELECT MIN(due_at) FROM debounce_timers;

-- name: due_timers
-- Skips timers another transaction is changing right now (a lease being taken, a re-arm).
SELECT conversation_id, due_at, deadline_at, armed_version
FROM debounce_timers WHERE due_at <= :now::float8 ORDER BY due_at LIMIT :limit::integer
FOR UPDATE SKIP LOCKED;

-- name: postpone_timer
UPDATE debounce_timers SET due_at = :due_at::float8
WHERE conversation_id = :cid AND due_at <= :now::float8;

-- name: acquire_lease
-- Two compare-and-swaps tried in turn: a free lease, then (a takeover) one whose holder let it
-- expire without releasing it.
UPDATE conversations
SET lease_owner = :owner, lease_token = lease_token + 1,
    lease_expires_at = COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp()))
                       + :ttl::float8
WHERE id = :cid AND lease_owner IS NULL
RETURNING lease_token, version, answered_version, lease_expires_at, failed_attempts;

-- name: take_over_lease
UPDATE conversations
SET lease_owner = :owner, lease_token = lease_token + 1,
    lease_expires_at = COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp()))
                       + :ttl::float8
WHERE id = :cid AND lease_owner IS NOT NULL AND lease_expires_at
                     < COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp()))
RETURNING lease_token, version, answered_version, lease_expires_at, failed_attempts;

-- name: hold_timer_deadline
-- `hold_timer`, returning the burst's deadline in the same statement.
UPDATE debounce_timers
SET due_at = CASE WHEN armed_version <= :version::bigint
                  THEN GREATEST(due_at, :expires_at::float8) ELSE due_at END
WHERE conversation_id = :cid
RETURNING deadline_at;

-- name: hold_timer
-- While a lease is held the timer waits for the lease's expiry (takeover after a crash), unless
-- newer input re-armed it.
UPDATE debounce_timers SET due_at = GREATEST(due_at, :expires_at::float8)
WHERE conversation_id = :cid AND armed_version <= :version::bigint;

-- name: lease_expiry
SELECT lease_expires_at FROM conversations WHERE id = :cid AND lease_owner IS NOT NULL;

-- name: renew_lease
UPDATE conversations
SET lease_expires_at = COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp()))
                       + :ttl::float8
WHERE id = :cid AND lease_token = :token::bigint AND lease_owner IS NOT NULL
RETURNING lease_expires_at;

-- name: restore_timer
-- Back to the natural schedule (quiet window, capped by the deadline) once no lease holds it.
UPDATE debounce_timers SET due_at = LEAST(due_at, quiet_until, deadline_at)
WHERE conversation_id = :cid;

-- name: release_lease
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token::bigint AND lease_owner IS NOT NULL
RETURNING id;

-- name: drop_timer
DELETE FROM debounce_timers WHERE conversation_id = :cid AND armed_version <= :version::bigint;

-- name: release_owner_leases
-- Conversation rows first, then their timers: the lock order every other transaction keeps.
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner = :owner
RETURNING id;

-- name: restore_owner_timers
UPDATE debounce_timers SET due_at = LEAST(due_at, quiet_until, deadline_at)
WHERE conversation_id = ANY(:cids::text[]);

-- name: release_owner_claims
UPDATE replies SET claim_owner = NULL, claim_expires_at = NULL
WHERE claim_owner = :owner AND state = 'pending';

-- name: current_version
SELECT version FROM conversations WHERE id = :cid;

-- name: lock_answered_version
SELECT answered_version FROM conversations WHERE id = :cid FOR NO KEY UPDATE;

-- name: pending_messages
SELECT seq, message_id, author_id, author_name, text, created_at, edited_at, deleted
FROM messages
WHERE conversation_id = :cid AND seq > :after::bigint AND seq <= :upto::bigint AND NOT deleted
ORDER BY seq;

-- name: history
SELECT role, author_name, text, version FROM (
    SELECT 'user' AS role, author_name, text, seq AS version, 0 AS ord
    FROM messages WHERE conversation_id = :cid AND seq <= :upto::bigint AND NOT deleted
    UNION ALL
    SELECT 'assistant', '', text, covers_to_version, 1
    FROM replies WHERE conversation_id = :cid AND covers_to_version <= :upto::bigint
                   AND state != 'failed' AND kind = 'answer'
) AS turns
WHERE version > (SELECT history_floor FROM conversations WHERE id = :cid)
ORDER BY version DESC, ord DESC LIMIT :limit::integer;

-- name: final_check
UPDATE conversations
SET answered_version = :version::bigint, lease_owner = NULL, lease_expires_at = NULL,
    failed_attempts = 0
WHERE id = :cid AND lease_token = :token::bigint AND answered_version < :version::bigint
  AND (version = :version::bigint OR :deadline_passed::boolean)
RETURNING version;

-- name: insert_reply
INSERT INTO replies (conversation_id, platform, covers_from_version, covers_to_version,
                     seen_version, reply_to_message_id, text, kind, next_attempt_at, created_at,
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
VALUES (:cid, :platform, :covers_from::bigint, :version::bigint, :seen_version::bigint,
        :reply_to, :text, :kind,
        :now::float8, :now::float8, :input_tokens::integer, :output_tokens::integer,
        :cache_read_tokens::integer, :cache_write_tokens::integer)
RETURNING *;

-- name: restart_cap
UPDATE debounce_timers
SET deadline_at = :now::float8 + :max_wait::float8,
    due_at = LEAST(quiet_until, :now::float8 + :max_wait::float8)
WHERE conversation_id = :cid AND armed_version > :version::bigint;

-- name: count_failure
UPDATE conversations
SET failed_attempts = failed_attempts + 1, lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token::bigint AND lease_owner IS NOT NULL
RETURNING failed_attempts;

-- name: rearm_after_failure
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, :retry_at::float8, :retry_at::float8, :retry_at::float8, 0)
ON CONFLICT (conversation_id) DO UPDATE SET due_at = :retry_at::float8;

-- name: record_generation
INSERT INTO generations (conversation_id, lease_token, from_version, to_version, started_at,
                         ended_at, outcome, input_tokens, output_tokens, cache_read_tokens,
                         cache_write_tokens, error)
VALUES (:cid, :token::bigint, :from_version::bigint, :to_version::bigint, :started_at::float8,
        :ended_at::float8, :outcome, :input_tokens::integer, :output_tokens::integer,
        :cache_read_tokens::integer, :cache_write_tokens::integer, :error);

-- name: claim_replies
-- The queue pattern: rows another worker is claiming right now are skipped, not waited for. The
-- pick is a materialized CTE so it runs once (an IN-subquery may be re-run per row, and a re-run
-- skips the rows this statement already locked and picks past the limit).
WITH picked AS MATERIALIZED (
    SELECT id FROM replies
    WHERE state = 'pending' AND next_attempt_at <= :now::float8
      AND (claim_owner IS NULL OR claim_expires_at
           < COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp())))
      AND platform = ANY(:platforms::text[])
      AND (:reply_id::bigint IS NULL OR id = :reply_id::bigint)
    ORDER BY id LIMIT :limit::integer
    FOR UPDATE SKIP LOCKED)
UPDATE replies
SET claim_owner = :owner,
    claim_expires_at = COALESCE(:lease_now::float8, EXTRACT(EPOCH FROM statement_timestamp()))
                       + :ttl::float8,
    attempts = attempts + 1
FROM picked
WHERE replies.id = picked.id
RETURNING replies.*;

-- name: next_outbox_at
SELECT MIN(CASE WHEN claim_owner IS NULL THEN next_attempt_at
                ELSE GREATEST(next_attempt_at, claim_expires_at) END)
FROM replies
WHERE state = 'pending' AND platform = ANY(:platforms::text[]);

-- name: mark_sent
UPDATE replies
SET state = 'sent', platform_message_ids = :ids::text[], sent_at = :now::float8,
    claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id::bigint AND state = 'pending'
RETURNING id;

-- name: mark_retry
UPDATE replies
SET next_attempt_at = :at::float8, last_error = :error, claim_owner = NULL,
    claim_expires_at = NULL
WHERE id = :id::bigint AND claim_owner = :owner AND state = 'pending'
RETURNING id;

-- name: mark_failed
UPDATE replies
SET state = 'failed', last_error = :error, claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id::bigint AND state = 'pending'
RETURNING id;

-- name: conversation_state
SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token, c.lease_expires_at,
       c.failed_attempts, t.due_at, t.deadline_at, t.armed_version
FROM conversations c LEFT JOIN debounce_timers t ON t.conversation_id = c.id
WHERE c.id = :cid;

-- name: replies
SELECT * FROM replies WHERE (:cid::text IS NULL OR conversation_id = :cid::text) ORDER BY id;

-- name: generations
SELECT conversation_id, lease_token, from_version, to_version, started_at, ended_at, outcome,
       input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, error
FROM generations WHERE (:cid::text IS NULL OR conversation_id = :cid::text) ORDER BY id;

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

-- name: reset_history
UPDATE conversations SET history_floor = version WHERE id = :cid RETURNING history_floor;

-- name: add_to_counter
INSERT INTO usage_counters AS c (scope, window_start, amount, expires_at)
VALUES (:scope, :window_start::bigint, :amount::bigint, :expires_at::double precision)
ON CONFLICT (scope, window_start) DO UPDATE SET amount = c.amount + excluded.amount
RETURNING amount;

-- name: prune_counters
DELETE FROM usage_counters WHERE expires_at < :now::double precision;

-- name: read_counter
SELECT amount FROM usage_counters WHERE scope = :scope AND window_start = :window_start::bigint;

-- name: list_conversations
-- Newest activity first; `active` keeps only conversations with something in flight.
SELECT * FROM (
    SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token,
           c.lease_expires_at, c.failed_attempts, c.history_floor,
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
WHERE NOT :active::boolean OR version > answered_version OR due_at IS NOT NULL
   OR lease_owner IS NOT NULL OR outbox_pending > 0 OR outbox_failed > 0
ORDER BY last_activity_at DESC LIMIT :limit::integer;

-- name: all_messages
SELECT seq, message_id, author_id, author_name, text, created_at, edited_at, deleted
FROM messages WHERE conversation_id = :cid ORDER BY seq;
