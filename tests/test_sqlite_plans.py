"""The statements the scheduler and workers run on every round must find their rows through an
index: a full scan of a table that grows with history (replies, messages) makes every due timer late
once the database holds a few hundred thousand rows."""

from __future__ import annotations

import sqlite3

import pytest

from storage.sqlite import MIGRATIONS, Q, _statements

HOT = (
    "earliest_timers",
    "due_timers",
    "speculative_timers",
    "acquire_lease",
    "hold_timer",
    "pending_messages",
    "history",
    "final_check",
    "claim_replies",
    "next_outbox_at",
    "mark_sent",
    "renew_claim",
    "current_version",
)
PARAMS = {
    "now": 0.0, "limit": 16, "platforms": '["x"]', "owner": "o", "ttl": 1.0, "reply_id": None,
    "cid": "x/w/c/", "after": 0, "upto": 1, "token": 1, "version": 1, "deadline_passed": 0,
    "stopping": 0, "id": 1, "ids": "[]", "expires_at": 1.0, "lease_now": 0.0, "claim": 1,
    "takeover": 0, "next_trace": None, "trace_context": None,
}  # fmt: skip


# Walked in index order and stopped by LIMIT after a handful of rows: a scan only in name.
INDEX_ORDERED = {
    "earliest_timers": {
        "SCAN debounce_timers USING INDEX debounce_timers_due",
        "SCAN debounce_timers USING INDEX debounce_timers_start",
    }
}


@pytest.fixture(scope="module")
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for script in MIGRATIONS:
        for statement in _statements(script):
            conn.execute(statement)
    return conn


@pytest.mark.parametrize("name", HOT)
def test_hot_statements_never_scan_a_table(db: sqlite3.Connection, name: str) -> None:
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + Q[name], PARAMS)]
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    scans = [step for step in plan if step.startswith("SCAN") and step.split()[1] in tables]
    scans = [step for step in scans if step not in INDEX_ORDERED.get(name, set())]
    assert not scans, f"{name}: {plan}"
