"""``switchboard trace CONVERSATION``: a conversation's replay, turn by turn, from the system of record."""

from __future__ import annotations

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings


def _line(text, limit: int = 100) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(replay: dict) -> str:
    c = replay["conversation"]
    lines = [f"conversation {c['external_id']} ({c['channel']}, customer {c['customer_id']}, id {c['id']}): "
             f"{c['state']}, session {c['session_no']}"]
    for t in replay["turns"]:
        d = t.get("decision") or {}
        cls = t.get("classification") or {}
        lines.append(f"{t['at'][:19]}  s{t['session_no']}  > {_line(t['inbound']['text'])}")
        decided = f"intent {d.get('intent') or cls.get('intent') or '-'}, tier {d.get('tier') or '-'}"
        esc = (d.get("escalation") or {}).get("rule")
        flow = t.get("flow") or {}
        extra = [f"escalation {esc}" if esc else "", f"flow {flow.get('workflow')} {flow.get('status')}" if flow else "",
                 f"ticket {(t.get('ticket') or {}).get('id')}" if (t.get("ticket") or {}).get("id") else "",
                 f"{len(t.get('tool_calls') or [])} tool calls" if t.get("tool_calls") else ""]
        lines.append(f"    {decided}" + "".join(f", {x}" for x in extra if x) + f" -> {t['state_after']}")
        if flow.get("failure"):
            lines.append(f"    ! flow failure: {_line(flow['failure'], 200)}")
        for o in t.get("outbound") or []:
            status = (o.get("delivery") or {}).get("status")
            lines.append(f"    < {o['sender']}: {_line(o['text'])}" + (f"  [{status}]" if status else ""))
        for e in t.get("events_after") or []:
            if e["type"] == "ticket_event":
                lines.append(f"    · ticket {e['action']} by {e['actor']} at {e['at'][:19]}")
    for s in replay["sessions"]:
        if s.get("feedback"):
            lines.append(f"session {s['session_no']}: CSAT {s['feedback']['csat']}")
    return "\n".join(lines)


def trace(
    conversation: str = typer.Argument(..., help="The client's conversation id (as sent by the channel or the "
                                       "API) or the internal id."),
    channel: str = typer.Option(None, "--channel", help="The channel of the client's id (needed when several "
                                "channels use it)."),
    as_json: bool = JsonOpt,
) -> None:
    """Replay one conversation turn by turn: decisions, stages, retrieval, tool calls, replies and their
    delivery, ticket events (what GET /v1/conversations/{id}/trace returns); personal data masked."""
    import psycopg
    from psycopg.rows import dict_row

    from router.ops.trace import AmbiguousConversation, find_conversation, load_trace

    dsn = database(settings())
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        try:
            found = find_conversation(conn, conversation, channel)
        except AmbiguousConversation as exc:
            fail(f"{exc} with --channel", as_json, code=2)
        replay = load_trace(conn, found) if found is not None else None
    if replay is None:
        fail(f"no conversation {conversation!r}" + (f" on channel {channel}" if channel else ""), as_json)
    emit(replay, as_json, render(replay))
