"""PostgreSQL connection limits: every wait is bounded, and a connection that stopped answering
is thrown away, never handed out again.

A network partition, a failover or lost NAT state leaves a TCP connection open on our side but
silent for good. Without limits, a statement on it waits forever: an ingest never acknowledges, a
lease renewal or a commit holds its generation slot. Rules:

- The server cancels a statement after `statement_seconds` (a clean error; the connection stays
  usable). The client waits that long plus `grace_seconds` for an answer: a server that has not
  answered by then is unreachable, so the connection is lost.
- A lost connection (client timeout, reset, closed, the server ending the session) is terminated,
  not returned to the pool, and every other pooled connection is expired with it: they went over
  the same network, and trying each dead one in turn would cost one timeout apiece. The next
  acquire opens a fresh connection (or fails within `connect_seconds`).
- Waiting for a free pooled connection is bounded by `acquire_seconds`.
- The server ends a session that sits idle inside a transaction for `idle_in_transaction_seconds`
  (a process cut off mid-transaction would otherwise hold conversation row locks until TCP
  notices), and sends TCP keepalives every `keepalive_seconds` so a vanished peer is found.

The limits are plain numbers here (the composition root builds them without importing asyncpg);
storage/postgres.py applies them and maps every one of these failures to `StoreError`, so a
process cut off from its database sees errors within the limits and carries on once new
connections go through.
"""

from __future__ import annotations

from dataclasses import dataclass

KEEPALIVE_PROBES = 3


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """How long PostgreSQL work may wait (`[storage]` in the config); see the module docstring."""

    statement_seconds: float = 10.0
    acquire_seconds: float = 10.0
    connect_seconds: float = 10.0
    keepalive_seconds: float = 10.0

    @property
    def grace_seconds(self) -> float:
        """Beyond the server's own statement timeout: a round trip and a slow scheduler."""
        return max(0.5, self.statement_seconds / 2)

    @property
    def command_seconds(self) -> float:
        """The client's limit for one statement, commit or connection reset."""
        return self.statement_seconds + self.grace_seconds

    @property
    def idle_in_transaction_seconds(self) -> float:
        """Our transactions never wait between statements on anything but the database."""
        return 2 * self.command_seconds

    def server_settings(self) -> dict[str, str]:
        """Session settings sent when each connection starts (no extra round trip)."""
        keepalive = max(1, round(self.keepalive_seconds))
        return {
            "statement_timeout": _milliseconds(self.statement_seconds),
            "idle_in_transaction_session_timeout": _milliseconds(self.idle_in_transaction_seconds),
            "tcp_keepalives_idle": str(keepalive),
            "tcp_keepalives_interval": str(keepalive),
            "tcp_keepalives_count": str(KEEPALIVE_PROBES),
        }


def _milliseconds(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))
