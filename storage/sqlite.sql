-- SQLite statements of burstbot, by name. Times are REAL seconds since the epoch.
-- Every compare-and-swap is one conditional statement whose RETURNING rows the caller reads.

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

-- name: ensure_conversation
INSERT INTO conversations (id, platform, created_at) VALUES (:cid, :platform, :now)
ON CONFLICT (id) DO NOTHING;

-- name: insert_message
INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, author_name, text,
                      created_at)
SELECT :cid, version + 1, :uid, :message_id, :author_id, :author_name, :text, :now
FROM conversations WHERE id = :cid
ON CONFLICT (message_uid) DO NOTHING
RETURNING seq;

-- name: bump_version
UPDATE conversations SET version = version + 1 WHERE id = :cid RETURNING version;

-- name: arm_timer
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, MIN(:now + :quiet, :now + :max_wait), :now + :max_wait, :now + :quiet, :version)
ON CONFLICT (conversation_id) DO UPDATE SET
    quiet_until = excluded.quiet_until,
    due_at = MIN(excluded.quiet_until, debounce_timers.deadline_at),
    armed_version = excluded.armed_version
RETURNING due_at;

-- name: find_message
SELECT m.conversation_id, m.seq, m.deleted, c.answered_version
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.message_uid = :uid;

-- name: edit_message
UPDATE messages SET text = :text, edited_at = :now
WHERE message_uid = :uid AND deleted = 0
RETURNING seq;

-- name: delete_message
UPDATE messages SET deleted = 1, edited_at = :now
WHERE message_uid = :uid AND deleted = 0
RETURNING seq;

-- name: flush_timer
UPDATE debounce_timers SET due_at = MIN(due_at, :now) WHERE conversation_id = :cid;

-- name: next_due_at
SELECT MIN(due_at) FROM debounce_timers;

-- name: due_timers
SELECT conversation_id, due_at, deadline_at, armed_version
FROM debounce_timers WHERE due_at <= :now ORDER BY due_at LIMIT :limit;

-- name: postpone_timer
UPDATE debounce_timers SET due_at = :due_at WHERE conversation_id = :cid AND due_at <= :now;

-- name: acquire_lease
-- Two compare-and-swaps tried in turn: a free lease, then (a takeover) one whose holder let it
-- expire without releasing it.
UPDATE conversations
SET lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :now + :ttl
WHERE id = :cid AND lease_owner IS NULL
RETURNING lease_token, version, answered_version, lease_expires_at, failed_attempts;

-- name: take_over_lease
UPDATE conversations
SET lease_owner = :owner, lease_token = lease_token + 1, lease_expires_at = :now + :ttl
WHERE id = :cid AND lease_owner IS NOT NULL AND lease_expires_at < :now
RETURNING lease_token, version, answered_version, lease_expires_at, failed_attempts;

-- name: hold_timer_deadline
-- `hold_timer`, returning the burst's deadline in the same statement.
UPDATE debounce_timers
SET due_at = CASE WHEN armed_version <= :version THEN MAX(due_at, :expires_at) ELSE due_at END
WHERE conversation_id = :cid
RETURNING deadline_at;

-- name: hold_timer
-- While a lease is held the timer waits for the lease's expiry (takeover after a crash), unless
-- newer input re-armed it.
UPDATE debounce_timers SET due_at = MAX(due_at, :expires_at)
WHERE conversation_id = :cid AND armed_version <= :version;

-- name: lease_expiry
SELECT lease_expires_at FROM conversations WHERE id = :cid AND lease_owner IS NOT NULL;

-- name: renew_lease
UPDATE conversations SET lease_expires_at = :now + :ttl
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING lease_expires_at;

-- name: restore_timer
-- Back to the natural schedule (quiet window, capped by the deadline) once no lease holds it.
UPDATE debounce_timers SET due_at = MIN(due_at, quiet_until, deadline_at)
WHERE conversation_id = :cid;

-- name: release_lease
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING id;

-- name: drop_timer
DELETE FROM debounce_timers WHERE conversation_id = :cid AND armed_version <= :version;

-- name: restore_owner_timers
UPDATE debounce_timers SET due_at = MIN(due_at, quiet_until, deadline_at)
WHERE conversation_id IN (SELECT id FROM conversations WHERE lease_owner = :owner);

-- name: release_owner_leases
UPDATE conversations SET lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner = :owner
RETURNING id;

-- name: release_owner_claims
UPDATE replies SET claim_owner = NULL, claim_expires_at = NULL
WHERE claim_owner = :owner AND state = 'pending';

-- name: current_version
SELECT version FROM conversations WHERE id = :cid;

-- name: answered_version
SELECT answered_version FROM conversations WHERE id = :cid;

-- name: pending_messages
SELECT seq, message_id, author_id, author_name, text, created_at, edited_at, deleted
FROM messages
WHERE conversation_id = :cid AND seq > :after AND seq <= :upto AND deleted = 0
ORDER BY seq;

-- name: history
SELECT role, author_name, text, version FROM (
    SELECT 'user' AS role, author_name, text, seq AS version, 0 AS ord
    FROM messages WHERE conversation_id = :cid AND seq <= :upto AND deleted = 0
    UNION ALL
    SELECT 'assistant', '', text, covers_to_version, 1
    FROM replies WHERE conversation_id = :cid AND covers_to_version <= :upto
                   AND state != 'failed' AND kind = 'answer'
) WHERE version > (SELECT history_floor FROM conversations WHERE id = :cid)
ORDER BY version DESC, ord DESC LIMIT :limit;

-- name: final_check
UPDATE conversations
SET answered_version = :version, lease_owner = NULL, lease_expires_at = NULL, failed_attempts = 0
WHERE id = :cid AND lease_token = :token AND answered_version < :version
  AND (version = :version OR :deadline_passed)
RETURNING version;

-- name: insert_reply
INSERT INTO replies (conversation_id, platform, covers_from_version, covers_to_version,
                     seen_version, reply_to_message_id, text, kind, next_attempt_at, created_at,
                     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
VALUES (:cid, :platform, :covers_from, :version, :seen_version, :reply_to, :text, :kind, :now, :now,
        :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens)
RETURNING *;

-- name: restart_cap
UPDATE debounce_timers
SET deadline_at = :now + :max_wait, due_at = MIN(quiet_until, :now + :max_wait)
WHERE conversation_id = :cid AND armed_version > :version;

-- name: count_failure
UPDATE conversations
SET failed_attempts = failed_attempts + 1, lease_owner = NULL, lease_expires_at = NULL
WHERE id = :cid AND lease_token = :token AND lease_owner IS NOT NULL
RETURNING failed_attempts;

-- name: rearm_after_failure
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
VALUES (:cid, :retry_at, :retry_at, :retry_at, 0)
ON CONFLICT (conversation_id) DO UPDATE SET due_at = :retry_at;

-- name: record_generation
INSERT INTO generations (conversation_id, lease_token, from_version, to_version, started_at,
                         ended_at, outcome, input_tokens, output_tokens, cache_read_tokens,
                         cache_write_tokens, error)
VALUES (:cid, :token, :from_version, :to_version, :started_at, :ended_at, :outcome,
        :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens, :error);

-- name: claim_replies
-- INDEXED BY: left alone, the planner walks every reply ever sent in id order to honour ORDER BY
-- id LIMIT; the partial index holds only pending rows.
UPDATE replies
SET claim_owner = :owner, claim_expires_at = :now + :ttl, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM replies INDEXED BY replies_pending
    WHERE state = 'pending' AND next_attempt_at <= :now
      AND (claim_owner IS NULL OR claim_expires_at < :now)
      AND platform IN (SELECT value FROM json_each(:platforms))
      AND (:reply_id IS NULL OR id = :reply_id)
    ORDER BY id LIMIT :limit)
  AND state = 'pending' AND (claim_owner IS NULL OR claim_expires_at < :now)
RETURNING *;

-- name: next_outbox_at
SELECT MIN(CASE WHEN claim_owner IS NULL THEN next_attempt_at
                ELSE MAX(next_attempt_at, claim_expires_at) END)
FROM replies
WHERE state = 'pending' AND platform IN (SELECT value FROM json_each(:platforms));

-- name: mark_sent
UPDATE replies
SET state = 'sent', platform_message_ids = :ids, sent_at = :now,
    claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id AND state = 'pending'
RETURNING id;

-- name: mark_retry
UPDATE replies
SET next_attempt_at = :at, last_error = :error, claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id AND claim_owner = :owner AND state = 'pending'
RETURNING id;

-- name: mark_failed
UPDATE replies
SET state = 'failed', last_error = :error, claim_owner = NULL, claim_expires_at = NULL
WHERE id = :id AND state = 'pending'
RETURNING id;

-- name: conversation_state
SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token, c.lease_expires_at,
       c.failed_attempts, t.due_at, t.deadline_at, t.armed_version
FROM conversations c LEFT JOIN debounce_timers t ON t.conversation_id = c.id
WHERE c.id = :cid;

-- name: replies
SELECT * FROM replies WHERE (:cid IS NULL OR conversation_id = :cid) ORDER BY id;

-- name: generations
SELECT conversation_id, lease_token, from_version, to_version, started_at, ended_at, outcome,
       input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, error
FROM generations WHERE (:cid IS NULL OR conversation_id = :cid) ORDER BY id;

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

-- name: reset_history
UPDATE conversations SET history_floor = version WHERE id = :cid RETURNING history_floor;

-- name: add_to_counter
INSERT INTO usage_counters (scope, window_start, amount, expires_at)
VALUES (:scope, :window_start, :amount, :expires_at)
ON CONFLICT (scope, window_start) DO UPDATE SET amount = amount + excluded.amount
RETURNING amount;

-- name: prune_counters
DELETE FROM usage_counters WHERE expires_at < :now;

-- name: read_counter
SELECT amount FROM usage_counters WHERE scope = :scope AND window_start = :window_start;

-- name: list_conversations
-- Newest activity first; `active` keeps only conversations with something in flight.
SELECT * FROM (
    SELECT c.id, c.version, c.answered_version, c.lease_owner, c.lease_token,
           c.lease_expires_at, c.failed_attempts, c.history_floor,
           t.due_at, t.deadline_at, t.armed_version,
           (SELECT COUNT(*) FROM messages m
            WHERE m.conversation_id = c.id AND m.seq > c.answered_version AND m.deleted = 0)
               AS pending_messages,
           (SELECT COUNT(*) FROM replies r WHERE r.conversation_id = c.id AND r.state = 'pending')
               AS outbox_pending,
           (SELECT COUNT(*) FROM replies r WHERE r.conversation_id = c.id AND r.state = 'failed')
               AS outbox_failed,
           COALESCE((SELECT MAX(created_at) FROM messages m WHERE m.conversation_id = c.id),
                    c.created_at) AS last_activity_at
    FROM conversations c LEFT JOIN debounce_timers t ON t.conversation_id = c.id
)
WHERE :active = 0 OR version > answered_version OR due_at IS NOT NULL
   OR lease_owner IS NOT NULL OR outbox_pending > 0 OR outbox_failed > 0
ORDER BY last_activity_at DESC LIMIT :limit;

-- name: all_messages
SELECT seq, message_id, author_id, author_name, text, created_at, edited_at, deleted
FROM messages WHERE conversation_id = :cid ORDER BY seq;

-- Group commit (storage/sqlite_batch.py): concurrent ingests land in a per-connection scratch table
-- and are applied with one statement per step, in arrival order, inside one transaction. The result
-- is the same as running `ensure_conversation`, `insert_message`, `bump_version` and `arm_timer`
-- for each message in turn.

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
    seq         INTEGER               -- set for accepted messages, NULL for duplicates
);
CREATE INDEX IF NOT EXISTS temp.ingest_batch_uid ON ingest_batch(uid);

-- name: fill_ingest_batch
INSERT INTO temp.ingest_batch (k, cid, platform, uid, message_id, author_id, author_name, text, now,
                               quiet, max_wait)
VALUES (:k, :cid, :platform, :uid, :message_id, :author_id, :author_name, :text, :now, :quiet,
        :max_wait);

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
                      created_at)
SELECT cid, seq, uid, message_id, author_id, author_name, text, now
FROM temp.ingest_batch WHERE seq IS NOT NULL ORDER BY k;

-- name: bump_batch_versions
UPDATE conversations SET version = added.top
FROM (SELECT cid, MAX(seq) AS top FROM temp.ingest_batch WHERE seq IS NOT NULL GROUP BY cid) AS added
WHERE conversations.id = added.cid;

-- name: arm_batch_timers
-- `arm_timer` applied message by message keeps the deadline set by the first new message (or the
-- existing timer's) and the quiet window of the last one.
INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, armed_version)
SELECT head.cid, MIN(tail.now + tail.quiet, head.now + head.max_wait), head.now + head.max_wait,
       tail.now + tail.quiet, tail.seq
FROM (SELECT cid, MIN(k) AS head_k, MAX(k) AS tail_k
      FROM temp.ingest_batch WHERE seq IS NOT NULL GROUP BY cid) AS span
JOIN temp.ingest_batch head ON head.k = span.head_k
JOIN temp.ingest_batch tail ON tail.k = span.tail_k
WHERE true
ON CONFLICT (conversation_id) DO UPDATE SET
    quiet_until = excluded.quiet_until,
    due_at = MIN(excluded.quiet_until, debounce_timers.deadline_at),
    armed_version = excluded.armed_version;

-- name: ingest_batch_results
-- Per message: its seq (accepted) or the conversation's version (duplicate), and the due time the
-- timer had right after it.
SELECT b.k, b.cid, b.seq, c.version, MIN(b.now + b.quiet, t.deadline_at) AS due_at
FROM temp.ingest_batch b
JOIN conversations c ON c.id = b.cid
LEFT JOIN debounce_timers t ON t.conversation_id = b.cid
ORDER BY b.k;

-- name: clear_ingest_batch
DELETE FROM temp.ingest_batch;
