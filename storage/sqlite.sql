-- SQLite's own statement: the one that differs from the shared ones in sql_store.sql (lists travel
-- as JSON text). Times are REAL seconds since the epoch, on the host's clock: `:now` is the
-- database's (sql_store.sql's `:db_now`).

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
