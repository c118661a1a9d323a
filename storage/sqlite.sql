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

-- Group commit (storage/sqlite_batch.py): concurrent ingests land in a per-connection scratch table
-- and are applied with one statement per step, in arrival order, inside one transaction. The result
-- is the same as the shared per-message ingest (`ensure_conversation`, `bump_version`,
-- `insert_message`, `arm_timer`; a duplicate id changes nothing) run for each message in turn.

-- name: create_ingest_batch
CREATE TEMP TABLE IF NOT EXISTS ingest_batch (
    k           INTEGER PRIMARY KEY,  -- arrival order within the batch
    cid         TEXT NOT NULL,
    platform    TEXT NOT NULL,
    uid         TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    author_id   TEXT NOT NULL,
    author_name TEXT NOT NULL,
    text        TEXT NOT NULL,
    now         REAL NOT NULL,
    quiet       REAL NOT NULL,
    max_wait    REAL NOT NULL,
    speculate_after REAL,             -- NULL: no early start (speculation off)
    via         TEXT NOT NULL,
    attachments TEXT NOT NULL,
    seq         INTEGER               -- set for accepted messages, NULL for duplicates
);
CREATE INDEX IF NOT EXISTS temp.ingest_batch_uid ON ingest_batch(uid);

-- name: fill_ingest_batch
INSERT INTO temp.ingest_batch (k, cid, platform, uid, message_id, author_id, author_name, text, now,
                               quiet, max_wait, speculate_after, via, attachments)
VALUES (:k, :cid, :platform, :uid, :message_id, :author_id, :author_name, :text, :now, :quiet,
        :max_wait, :speculate_after, :via, :attachments);

-- name: ensure_batch_conversations
INSERT INTO conversations (id, platform, created_at)
SELECT cid, platform, MIN(now) FROM temp.ingest_batch WHERE true GROUP BY cid
ON CONFLICT (id) DO NOTHING;

-- name: number_batch_messages
-- The first copy of each id not stored yet gets its conversation's next seq, in arrival order;
-- later copies and ids stored before keep seq NULL (duplicates).
UPDATE temp.ingest_batch SET seq = numbered.seq
FROM (
    SELECT b.k, c.version + ROW_NUMBER() OVER (PARTITION BY b.cid ORDER BY b.k) AS seq
    FROM temp.ingest_batch b JOIN conversations c ON c.id = b.cid
    WHERE b.k = (SELECT MIN(f.k) FROM temp.ingest_batch f WHERE f.uid = b.uid)
      AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.message_uid = b.uid)
) AS numbered
WHERE ingest_batch.k = numbered.k;

-- name: insert_batch_messages
INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, author_name, text,
                      created_at, via, attachments)
SELECT cid, seq, uid, message_id, author_id, author_name, text, now, via, attachments
FROM temp.ingest_batch WHERE seq IS NOT NULL ORDER BY k;

-- name: bump_batch_versions
UPDATE conversations SET version = added.top
FROM (SELECT cid, MAX(seq) AS top FROM temp.ingest_batch WHERE seq IS NOT NULL GROUP BY cid) AS added
WHERE conversations.id = added.cid;

-- name: arm_batch_timers
-- `arm_timer` applied message by message keeps the deadline set by the first new message (or the
-- existing timer's) and the quiet window and early start of the last one.
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version,
                             start_at)
SELECT head.cid, MIN(tail.now + tail.quiet, head.now + head.max_wait), head.now + head.max_wait,
       tail.now + tail.quiet, tail.seq,
       CASE WHEN tail.speculate_after IS NOT NULL
            THEN MIN(tail.now + tail.speculate_after, tail.now + tail.quiet,
                     head.now + head.max_wait) END
FROM (SELECT cid, MIN(k) AS head_k, MAX(k) AS tail_k
      FROM temp.ingest_batch WHERE seq IS NOT NULL GROUP BY cid) AS span
JOIN temp.ingest_batch head ON head.k = span.head_k
JOIN temp.ingest_batch tail ON tail.k = span.tail_k
WHERE true
ON CONFLICT (conversation_id) DO UPDATE SET
    quiet_until = excluded.quiet_until,
    due_at = MIN(excluded.quiet_until, debounce_timers.deadline_at),
    start_at = CASE WHEN excluded.start_at IS NOT NULL
                    THEN MIN(excluded.start_at, debounce_timers.deadline_at) END,
    armed_version = excluded.armed_version;

-- name: ingest_batch_results
-- Per message: its seq (accepted) or the conversation's version (duplicate), and the due time the
-- timer had right after it.
SELECT b.k, b.cid, b.seq, c.version, MIN(b.now + b.quiet, t.deadline_at) AS due_at,
       CASE WHEN b.speculate_after IS NOT NULL
            THEN MIN(b.now + b.speculate_after, b.now + b.quiet, t.deadline_at) END AS start_at
FROM temp.ingest_batch b
JOIN conversations c ON c.id = b.cid
LEFT JOIN debounce_timers t ON t.conversation_id = b.cid
ORDER BY b.k;

-- name: clear_ingest_batch
DELETE FROM temp.ingest_batch;
