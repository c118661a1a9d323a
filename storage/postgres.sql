-- PostgreSQL's own statements, by name: the schema's bookkeeping, wake-up hints and the
-- statement that differs from the shared ones in sql_store.sql (SKIP LOCKED in a CTE).
-- Times are DOUBLE PRECISION seconds since the epoch. `:name` parameters become $n; :db_now is the
-- statement's timestamp and :skew the caller's clock minus it (see sql_store.sql; with
-- clock="caller" the caller's `:now` and 0).

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
-- 'timer <due_at>', 'outbox <platform>', 'released' or 'stop <conversation id>'.
SELECT pg_notify('burstbot_wakeup', :payload::text);

-- name: claim_replies
-- The queue pattern: rows another worker is claiming right now are skipped, not waited for. The
-- pick is a materialized CTE so it runs once (an IN-subquery may be re-run per row, and a re-run
-- skips the rows this statement already locked and picks past the limit). A row waits while an
-- earlier reply of its conversation is pending (G9: in commit order).
WITH picked AS MATERIALIZED (
    SELECT r.id FROM replies r
    WHERE r.state = 'pending' AND r.next_attempt_at <= :db_now::float8
      AND (r.claim_owner IS NULL OR r.claim_expires_at < :db_now::float8)
      AND r.platform = ANY(:platforms::text[])
      AND (:reply_id::bigint IS NULL OR r.id = :reply_id::bigint)
      AND NOT EXISTS (SELECT 1 FROM replies e
                      WHERE e.conversation_id = r.conversation_id AND e.state = 'pending'
                        AND e.id < r.id)
    ORDER BY r.id LIMIT :limit::integer
    FOR UPDATE SKIP LOCKED)
UPDATE replies
SET claim_owner = :owner, claim_expires_at = :db_now::float8 + :ttl::float8,
    claim_token = claim_token + 1
FROM picked
WHERE replies.id = picked.id
RETURNING replies.*, replies.claim_expires_at + :skew AS claim_expires_here;
