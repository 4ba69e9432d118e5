"""Reading the tool gateway's audit (``tool_calls``) for a turn's trace and a ticket's context package.

Rows are already redacted when written; these readers return them as plain dicts, oldest first.
"""

from __future__ import annotations

from typing import Any

_COLUMNS = ("id, conversation_id, turn_id, purpose, tool, risk, caller_channel, caller_customer, input, output,"
            " status, error, latency_ms, attempts, idempotency_key, created_at")


def _rows(pool, where: str, params: tuple) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        cur = conn.execute(f"SELECT {_COLUMNS} FROM tool_calls WHERE {where}", params)
        names = [d.name for d in cur.description]
        out = []
        for row in cur.fetchall():
            item = dict(row) if isinstance(row, dict) else dict(zip(names, row))
            item["id"] = str(item["id"])
            item["created_at"] = item["created_at"].isoformat()
            out.append(item)
    return out


def calls_for_turn(pool, turn_id: str) -> list[dict[str, Any]]:
    return _rows(pool, "turn_id = %s ORDER BY created_at, id", (str(turn_id),))


def calls_for_conversation(pool, conversation_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """The conversation's most recent calls (at most ``limit``), oldest first."""
    rows = _rows(pool, "conversation_id = %s ORDER BY created_at DESC, id DESC LIMIT %s",
                 (str(conversation_id), int(limit)))
    return rows[::-1]
