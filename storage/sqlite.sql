-- SQLite's own statements, by name: the schema and the statements that differ from the shared
-- ones in sql_store.sql (no row locks: `BEGIN IMMEDIATE` already holds the write lock; lists travel
-- as JSON text). Times are REAL seconds since the epoch, on the host's clock: `:now` is the
-- database's (sql_store.sql's `:db_now`).

-- name: migration_1
CREATE TABLE conversations (
    id                TEXT PRIMARY KEY,
    platform          TEXT NOT NULL,
    version           INTEGER NOT NULL DEFAULT 0,
    answered_version  INTEGER NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_token       INTEGER NOT NULL DEFAULT 0,
    lease_expires_at  REAL,
    failed_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL
);
CREATE TABLE messages (
    conversation_id   TEXT NOT NULL REFERENCES conversations(id),
    seq               INTEGER NOT NULL,
    message_uid       TEXT NOT NULL UNIQUE,
    message_id        TEXT NOT NULL,
    author_id         TEXT NOT NULL,
    author_name       TEXT NOT NULL,
    text              TEXT NOT NULL,
    created_at        REAL NOT NULL,
    edited_at         REAL,
    deleted           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE debounce_timers (
    conversation_id   TEXT PRIMARY KEY REFERENCES conversations(id),
    due_at            REAL NOT NULL,
    deadline_at       REAL NOT NULL,
    quiet_until       REAL NOT NULL,
    armed_version     INTEGER NOT NULL
);
CREATE INDEX debounce_timers_due ON debounce_timers(due_at);
CREATE TABLE replies (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id     TEXT NOT NULL REFERENCES conversations(id),
    platform            TEXT NOT NULL,
    covers_from_version INTEGER NOT NULL,
    covers_to_version   INTEGER NOT NULL,
    seen_version        INTEGER NOT NULL,
    reply_to_message_id TEXT,
    text                TEXT NOT NULL,
    kind                TEXT NOT NULL DEFAULT 'answer',
    state               TEXT NOT NULL DEFAULT 'pending',
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     REAL NOT NULL,
    claim_owner         TEXT,
    claim_expires_at    REAL,
    platform_message_ids TEXT NOT NULL DEFAULT '[]',
    last_error          TEXT,
    created_at          REAL NOT NULL,
    sent_at             REAL,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
    UNIQUE (conversation_id, covers_to_version)
);
CREATE INDEX replies_pending ON replies(next_attempt_at) WHERE state = 'pending';
CREATE TABLE generations (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id    TEXT NOT NULL,
    lease_token        INTEGER NOT NULL,
    from_version       INTEGER NOT NULL,
    to_version         INTEGER NOT NULL,
    started_at         REAL NOT NULL,
    ended_at           REAL NOT NULL,
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
ALTER TABLE conversations ADD COLUMN history_floor INTEGER NOT NULL DEFAULT 0;
CREATE TABLE usage_counters (
    scope             TEXT NOT NULL,
    window_start      INTEGER NOT NULL,
    amount            INTEGER NOT NULL DEFAULT 0,
    expires_at        REAL NOT NULL,
    PRIMARY KEY (scope, window_start)
);
CREATE INDEX usage_counters_expiry ON usage_counters(expires_at);

-- name: find_message
SELECT m.conversation_id, m.seq, m.deleted, c.answered_version
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.message_uid = :uid;

-- name: lock_answered_version
-- No lock clause here or in `find_message`: the transaction's BEGIN IMMEDIATE holds the write lock.
SELECT answered_version FROM conversations WHERE id = :cid;

-- name: due_timers
SELECT conversation_id, due_at, deadline_at, armed_version, start_at
FROM debounce_timers WHERE due_at <= :now ORDER BY due_at LIMIT :limit;

-- name: speculative_timers
-- Timers due at their early start whose window is still open (`due_timers` takes the closed ones
-- first).
SELECT conversation_id, due_at, deadline_at, armed_version, start_at
FROM debounce_timers WHERE start_at <= :now AND due_at > :now ORDER BY start_at LIMIT :limit;

-- name: restore_owner_timers
-- :cids is a JSON array of the conversations `release_owner_leases` just released.
UPDATE debounce_timers SET due_at = MIN(due_at, quiet_until, deadline_at)
WHERE conversation_id IN (SELECT value FROM json_each(:cids));

-- name: claim_replies
-- INDEXED BY: left alone, the planner walks every reply ever sent in id order to honour ORDER BY
-- id LIMIT; the partial index holds only pending rows. A row waits while an earlier reply of its
-- conversation is pending (G9: in commit order; a Retry-After holds back that conversation only).
UPDATE replies
SET claim_owner = :owner, claim_expires_at = :now + :ttl, claim_token = claim_token + 1
WHERE id IN (
    SELECT r.id FROM replies AS r INDEXED BY replies_pending
    WHERE r.state = 'pending' AND r.next_attempt_at <= :now
      AND (r.claim_owner IS NULL OR r.claim_expires_at < :now)
      AND r.platform IN (SELECT value FROM json_each(:platforms))
      AND (:reply_id IS NULL OR r.id = :reply_id)
      AND NOT EXISTS (SELECT 1 FROM replies AS e
                      WHERE e.conversation_id = r.conversation_id AND e.state = 'pending'
                        AND e.id < r.id)
    ORDER BY r.id LIMIT :limit)
  AND state = 'pending' AND (claim_owner IS NULL OR claim_expires_at < :now)
RETURNING *, claim_expires_at AS claim_expires_here;

-- name: next_outbox_at
-- Only the first pending reply of each conversation can be claimed next.
SELECT MIN(CASE WHEN r.claim_owner IS NULL THEN r.next_attempt_at
                ELSE MAX(r.next_attempt_at, r.claim_expires_at) END)
FROM replies AS r
WHERE r.state = 'pending' AND r.platform IN (SELECT value FROM json_each(:platforms))
  AND NOT EXISTS (SELECT 1 FROM replies AS e
                  WHERE e.conversation_id = r.conversation_id AND e.state = 'pending'
                    AND e.id < r.id);
