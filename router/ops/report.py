"""Operations report: how much the bot resolves, how much reaches people, and how customers feel.

Everything is computed from the system of record (turns, state transitions, tickets and their
events, feedback), so the figures are the same whichever pod or job asks. Definitions:

- a **session** is one (conversation, session number) with a turn in the window; it is *routed*
  when at least one of its turns was given a tier (harness-only sessions, e.g. STOP, are not);
- **auto-resolution**: routed sessions answered at L1 with no L2/L3 turn (no person involved); a reply that
  only asks for something (a clarification, "what is your order number?") is not an answer;
- **clarified**: routed sessions whose bot replies were only clarifications (no answer, no person): their own
  category, neither resolved nor transferred;
- **transfer**: routed sessions with an L3 turn (handed to a person); **assist**: L2 but no L3;
- **first-contact resolution**: routed sessions that reached a resolved state (an answer, a
  resolved ticket, or closed) and after which the same customer did not come back within the
  re-contact window (sessions at the end of the window may not have had the chance yet);
- **average handling time**: from a ticket's first claim to its resolution (from ticket events),
  for tickets resolved in the window; wait = opened to first claim;
- **CSAT**: ratings given in the window (1-5); satisfied = 4 or 5;
- **L1 answers without a citation** must be 0: every answer from the knowledge base cites it (only
  those are counted: small talk, clarifications and workflow replies, e.g. a greeting, "what is your
  order number?" or "Refunded 30", are not knowledge-base answers and need no citation);
- **deflection**: routed turns by what they did for the customer (the turn's ``outcome``:
  resolved by the bot, clarified, ticketed = opened a ticket, held = added to a person's ticket,
  none), by channel and by reply language.

Channels are keyed by the closed set of the channel registry (``channels``: the CLI passes
:data:`router.channels.registry.CHANNELS`); a legacy or unknown channel string stored on an old row is counted
under ``other``, so a client-chosen value (a phone number as a channel name) never becomes a key of the report.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from collections.abc import Collection
from typing import Any

import psycopg

from handoff import queries as ticket_reads
from rag.generations import index_refusals

RESOLVED_STATES = ("l1_resolved", "l2_resolved", "feedback_pending", "closed")
_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """``7d``, ``24h``, ``30m``, ``2w`` before now, or an ISO date/time (UTC unless it says otherwise)."""
    now = now or datetime.now(timezone.utc)
    m = _DURATION.match(value)
    if m:
        n = int(m.group(1))
        if n <= 0:
            raise ValueError(f"the window must be positive, got {value!r}")
        return now - timedelta(**{_UNITS[m.group(2)]: n})
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is neither a duration like 7d/24h/30m/2w nor an ISO date") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _seconds(value) -> float | None:
    return None if value is None else round(float(value), 1)


_SESSIONS_SQL = """
WITH win AS (
    SELECT DISTINCT conversation_id, session_no FROM turns
    WHERE created_at >= %(since)s AND created_at < %(until)s
), s AS (
    SELECT t.conversation_id, t.session_no, c.customer_id, c.channel,
           min(t.created_at) AS started_at, max(t.created_at) AS last_at,
           bool_or(t.decision ->> 'tier' IS NOT NULL OR t.response ->> 'outcome' = 'clarified') AS routed,
           bool_or(t.decision ->> 'tier' IS NOT DISTINCT FROM 'L1' AND jsonb_typeof(t.response -> 'reply') = 'object'
                   AND t.response ->> 'outcome' IS DISTINCT FROM 'clarified') AS l1_answered,
           bool_or(t.response ->> 'outcome' = 'clarified') AS clarified,
           bool_or(t.decision ->> 'tier' IS NOT DISTINCT FROM 'L2') AS l2,   -- false, not null, without a tier
           bool_or(t.decision ->> 'tier' IS NOT DISTINCT FROM 'L3') AS l3
    FROM turns t
    JOIN win USING (conversation_id, session_no)
    JOIN conversations c ON c.id = t.conversation_id
    GROUP BY t.conversation_id, t.session_no, c.customer_id, c.channel
), judged AS (
    SELECT s.*,
           s.routed AND s.l1_answered AND NOT s.l2 AND NOT s.l3 AS auto_resolved,
           EXISTS (SELECT 1 FROM conversation_transitions tr
                   WHERE tr.conversation_id = s.conversation_id AND tr.session_no = s.session_no
                     AND tr.to_state = ANY(%(resolved)s)) AS resolved,
           EXISTS (SELECT 1 FROM turns t2 JOIN conversations c2 ON c2.id = t2.conversation_id
                   WHERE c2.customer_id = s.customer_id
                     AND (t2.conversation_id, t2.session_no) <> (s.conversation_id, s.session_no)
                     AND t2.created_at > s.last_at AND t2.created_at <= s.last_at + %(recontact)s) AS recontacted
    FROM s
)
SELECT (started_at AT TIME ZONE 'UTC')::date AS day, channel,
       count(*) AS sessions,
       count(*) FILTER (WHERE routed) AS routed,
       count(*) FILTER (WHERE auto_resolved) AS auto_resolved,
       count(*) FILTER (WHERE routed AND clarified AND NOT l1_answered AND NOT l2 AND NOT l3) AS clarified,
       count(*) FILTER (WHERE routed AND l2 AND NOT l3) AS assisted,
       count(*) FILTER (WHERE routed AND l3) AS transferred,
       count(*) FILTER (WHERE routed AND resolved) AS resolved,
       count(*) FILTER (WHERE routed AND resolved AND NOT recontacted) AS first_contact_resolved
FROM judged GROUP BY 1, 2 ORDER BY 1, 2
"""

def build_report(conn: psycopg.Connection, since: datetime, until: datetime | None = None, *,
                 recontact_window: timedelta = timedelta(hours=72),
                 channels: Collection[str] | None = None) -> dict[str, Any]:
    """All figures for [since, until) as one JSON-ready dict; ``channels``: the registry's names (others are
    ``other``; None keeps the stored strings, for callers that have no registry)."""
    from router.telemetry.metrics import OTHER

    def channel_key(channel: Any) -> str:
        return channel if channels is None or channel in channels else OTHER

    until = until or datetime.now(timezone.utc)
    if since >= until:
        raise ValueError("the window is empty: since must be before until")
    p = {"since": since, "until": until, "resolved": list(RESOLVED_STATES), "recontact": recontact_window}

    rows = conn.execute(_SESSIONS_SQL, p).fetchall()
    tot = {k: sum(r[k] for r in rows) for k in ("sessions", "routed", "auto_resolved", "clarified", "assisted",
                                               "transferred", "resolved", "first_contact_resolved")}
    by_channel: dict[str, int] = {}
    days: dict[str, dict[str, int]] = {}
    for r in rows:
        key = channel_key(r["channel"])
        by_channel[key] = by_channel.get(key, 0) + r["sessions"]
        d = days.setdefault(r["day"].isoformat(), {"sessions": 0, "routed": 0, "auto_resolved": 0, "transferred": 0})
        for k in d:
            d[k] += r[k]
    daily = [{"day": day, **d, "auto_resolution_rate": _rate(d["auto_resolved"], d["routed"]),
              "transfer_rate": _rate(d["transferred"], d["routed"])} for day, d in sorted(days.items())]

    volume = conn.execute(
        """
        SELECT count(DISTINCT conversation_id) AS conversations, count(*) AS turns,
               count(*) FILTER (WHERE decision ->> 'tier' = 'L1') AS l1,
               count(*) FILTER (WHERE decision ->> 'tier' = 'L2') AS l2,
               count(*) FILTER (WHERE decision ->> 'tier' = 'L3') AS l3,
               count(*) FILTER (WHERE decision ->> 'tier' IS NULL) AS untiered
        FROM turns WHERE created_at >= %(since)s AND created_at < %(until)s
        """, p).fetchone()
    inbound = conn.execute(
        "SELECT count(*) AS n FROM messages WHERE direction = 'in' AND received_at >= %(since)s "
        "AND received_at < %(until)s", p).fetchone()["n"]

    escalations = {r["rule"]: r["n"] for r in conn.execute(
        """
        SELECT decision -> 'escalation' ->> 'rule' AS rule, count(*) AS n FROM turns
        WHERE created_at >= %(since)s AND created_at < %(until)s AND decision -> 'escalation' ->> 'rule' IS NOT NULL
        GROUP BY 1 ORDER BY 2 DESC, 1
        """, p)}

    handling = ticket_reads.handling_times(conn, since, until)     # handoff's tables, through its read functions
    opened = ticket_reads.tickets_opened(conn, since, until)
    breached = ticket_reads.sla_breaches(conn, since, until)

    csat_rows = conn.execute(
        "SELECT csat, count(*) AS n FROM feedback WHERE created_at >= %(since)s AND created_at < %(until)s "
        "GROUP BY csat", p).fetchall()
    distribution = {str(score): 0 for score in range(1, 6)}
    for r in csat_rows:
        distribution[str(r["csat"])] = r["n"]
    responses = sum(distribution.values())

    l1 = conn.execute(
        """
        SELECT count(*) AS answers,
               count(*) FILTER (WHERE jsonb_typeof(response -> 'reply' -> 'citations') IS DISTINCT FROM 'array'
                                   OR jsonb_array_length(response -> 'reply' -> 'citations') = 0) AS uncited,
               (array_agg(id::text ORDER BY created_at)
                    FILTER (WHERE jsonb_typeof(response -> 'reply' -> 'citations') IS DISTINCT FROM 'array'
                               OR jsonb_array_length(response -> 'reply' -> 'citations') = 0))[1:20] AS examples
        FROM turns
        WHERE created_at >= %(since)s AND created_at < %(until)s
          AND decision ->> 'tier' = 'L1' AND jsonb_typeof(response -> 'reply') = 'object'
          AND COALESCE(decision -> 'explanation' ? 'answer', false)   -- answered from the knowledge base
        """, p).fetchone()

    refusals = index_refusals(conn, since, until)

    deflection = _deflection(conn.execute(
        """
        SELECT c.channel, COALESCE(t.response ->> 'outcome', 'none') AS outcome,
               COALESCE(t.response ->> 'lang', 'unknown') AS lang, count(*) AS n
        FROM turns t JOIN conversations c ON c.id = t.conversation_id
        WHERE t.created_at >= %(since)s AND t.created_at < %(until)s
        GROUP BY 1, 2, 3
        """, p).fetchall(), channel_key)

    flows = _flows(conn, since, until)
    routed = tot["routed"]
    all_h = handling.get("all") or {}
    report = {
        "window": {"since": since.isoformat(), "until": until.isoformat(),
                   "days": round((until - since).total_seconds() / 86400, 2)},
        "volume": {"conversations": volume["conversations"], "sessions": tot["sessions"], "routed_sessions": routed,
                   "inbound_messages": inbound, "turns": volume["turns"],
                   "turns_by_tier": {"L1": volume["l1"], "L2": volume["l2"], "L3": volume["l3"],
                                     "none": volume["untiered"]},
                   "sessions_by_channel": dict(sorted(by_channel.items()))},
        "auto_resolution": {"sessions": tot["auto_resolved"], "rate": _rate(tot["auto_resolved"], routed)},
        "clarified": {"sessions": tot["clarified"], "rate": _rate(tot["clarified"], routed)},
        "transfer": {"sessions": tot["transferred"], "rate": _rate(tot["transferred"], routed)},
        "assist": {"sessions": tot["assisted"], "rate": _rate(tot["assisted"], routed)},
        "escalations_by_rule": escalations,
        "first_contact_resolution": {"sessions": tot["first_contact_resolved"],
                                     "rate": _rate(tot["first_contact_resolved"], routed),
                                     "resolved_sessions": tot["resolved"],
                                     "recontact_window_hours": round(recontact_window.total_seconds() / 3600, 2)},
        "handling": {
            "tickets_resolved": all_h.get("tickets", 0),
            "average_handling_seconds": _seconds(all_h.get("handling")),
            "average_wait_seconds": _seconds(all_h.get("wait")),
            "average_resolution_seconds": _seconds(all_h.get("resolution")),
            "by_kind": {k: {"tickets_resolved": r["tickets"], "average_handling_seconds": _seconds(r["handling"]),
                            "average_wait_seconds": _seconds(r["wait"])}
                        for k, r in sorted(handling.items()) if k != "all"},
        },
        "tickets": {"opened": opened, "sla_breached": breached},
        "csat": {"responses": responses,
                 "average": round(sum(int(s) * n for s, n in distribution.items()) / responses, 3) if responses else None,
                 "satisfied_rate": _rate(distribution["4"] + distribution["5"], responses),
                 "distribution": distribution},
        "l1_answers": {"total": l1["answers"], "without_citation": l1["uncited"],
                       "examples_without_citation": l1["examples"] or []},
        "knowledge_base": {"refused_updates": refusals["in_window"], "refused_updates_total": refusals["total"],
                           "latest_refusal": refusals["latest"]},
        "deflection": deflection,
        "workflows": flows,
        "daily": daily,
    }
    report["checks"] = {"l1_answers_cited": l1["uncited"] == 0, "knowledge_updates_applied": refusals["in_window"] == 0}
    return report


def _flows(conn, since: datetime, until: datetime) -> dict[str, Any]:
    """Task completion per workflow: flows started in the window and how they ended (completed = the task
    was done; refused = the shop's rules said no; cancelled = abandoned or rejected; escalated = a person)."""
    from automation.workflows.store import completion_by_workflow

    per = completion_by_workflow(conn, since, until)
    out = {}
    for name, c in per.items():
        finished = c["started"] - c["active"]
        out[name] = {**c, "completion_rate": _rate(c["completed"], c["started"]),
                     "completion_rate_of_finished": _rate(c["completed"], finished),
                     "escalation_rate": _rate(c["escalated"], c["started"]),
                     "abandon_rate": _rate(c["cancelled"], c["started"])}
    total = {k: sum(c[k] for c in per.values()) for k in ("started", "completed", "refused", "cancelled",
                                                            "escalated", "active")}
    return {"by_workflow": out, **total, "completion_rate": _rate(total["completed"], total["started"])}


def _deflection(rows, key) -> dict[str, Any]:
    from router.telemetry.metrics import REPLY_LANGUAGES as LANGUAGES
    from router.telemetry.metrics import TURN_OUTCOMES as OUTCOMES

    def empty() -> dict[str, int]:
        return {o: 0 for o in OUTCOMES}

    total, by_channel, by_lang = empty(), {}, {lang: empty() for lang in (*LANGUAGES, "unknown")}
    for r in rows:
        outcome = r["outcome"] if r["outcome"] in OUTCOMES else "none"
        lang = r["lang"] if r["lang"] in LANGUAGES else "unknown"
        total[outcome] += r["n"]
        by_channel.setdefault(key(r["channel"]), empty())[outcome] += r["n"]
        by_lang[lang][outcome] += r["n"]
    turns = sum(total.values())
    return {"turns": turns, "outcomes": total,
            "rates": {o: _rate(n, turns) for o, n in total.items()},
            "by_channel": dict(sorted(by_channel.items())), "by_lang": by_lang}


# ----------------------------------------------------------------------------------------- charts


def write_charts(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """PNG charts of the report (and the report itself as report.json) in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")   # files only, never a display
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    window = f"{report['window']['since'][:10]} .. {report['window']['until'][:10]}"
    paths: list[Path] = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    # 1. session outcomes
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    routed = report["volume"]["routed_sessions"]
    labels = ["auto-resolved (L1)", "clarified only", "assisted (L2)", "transferred (L3)"]
    values = [report["auto_resolution"]["sessions"], report["clarified"]["sessions"], report["assist"]["sessions"],
              report["transfer"]["sessions"]]
    labels.append("other")
    values.append(max(routed - sum(values), 0))
    bars = ax.bar(labels, values, color=["#2a9d8f", "#8ab17d", "#e9c46a", "#e76f51", "#a8a8a8"])
    for bar, v in zip(bars, values, strict=True):
        pct = f" ({v / routed:.0%})" if routed else ""
        ax.annotate(f"{v}{pct}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_ylabel("sessions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"Session outcomes, {routed} routed sessions ({window})", fontsize=10)
    save(fig, "outcomes.png")

    # 2. daily rates
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    daily = report["daily"]
    if daily:
        x = [d["day"] for d in daily]
        nan = float("nan")   # a day without routed sessions has no rate: a gap, not a zero
        ax.plot(x, [nan if d["auto_resolution_rate"] is None else d["auto_resolution_rate"] for d in daily],
                marker="o", label="auto-resolution")
        ax.plot(x, [nan if d["transfer_rate"] is None else d["transfer_rate"] for d in daily],
                marker="o", label="transfer to a person")
        ax.set_ylim(-0.02, 1.05)
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    else:
        ax.text(0.5, 0.5, "no sessions in the window", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("share of routed sessions")
    ax.set_title("Auto-resolution and transfer rate by day", fontsize=10)
    save(fig, "daily_rates.png")

    # 3. escalations by rule
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    esc = report["escalations_by_rule"]
    if esc:
        rules = list(esc)[::-1]
        ax.barh(rules, [esc[r] for r in rules], color="#e76f51")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("escalations")
    else:
        ax.text(0.5, 0.5, "no escalations in the window", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("Escalations by rule", fontsize=10)
    save(fig, "escalations.png")

    # 4. CSAT distribution
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    dist = report["csat"]["distribution"]
    ax.bar(list(dist), list(dist.values()), color=["#d62828", "#f77f00", "#fcbf49", "#90be6d", "#2a9d8f"])
    avg = report["csat"]["average"]
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("rating")
    ax.set_ylabel("responses")
    ax.set_title(f"CSAT: {report['csat']['responses']} responses, average "
                 f"{avg if avg is not None else 'n/a'}", fontsize=10)
    save(fig, "csat.png")

    (out_dir / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2, default=str),
                                         encoding="utf-8")
    return paths


def render_text(report: dict[str, Any]) -> str:
    """A short plain-text summary for the terminal."""

    def pct(v):
        return "n/a" if v is None else f"{v:.1%}"

    def dur(v):
        return "n/a" if v is None else f"{v / 60:.1f} min"

    v, h, c = report["volume"], report["handling"], report["csat"]
    lines = [
        f"switchboard report {report['window']['since'][:16]} .. {report['window']['until'][:16]} UTC",
        f"  sessions            {v['sessions']} ({v['routed_sessions']} routed, {v['conversations']} conversations, "
        f"{v['inbound_messages']} messages)",
        f"  auto-resolution     {pct(report['auto_resolution']['rate'])} ({report['auto_resolution']['sessions']})",
        f"  clarified only      {pct(report['clarified']['rate'])} ({report['clarified']['sessions']})",
        f"  transfer (L3)       {pct(report['transfer']['rate'])} ({report['transfer']['sessions']})",
        f"  assisted (L2)       {pct(report['assist']['rate'])} ({report['assist']['sessions']})",
        f"  first-contact res.  {pct(report['first_contact_resolution']['rate'])}",
        f"  avg handling time   {dur(h['average_handling_seconds'])} over {h['tickets_resolved']} resolved tickets "
        f"(wait {dur(h['average_wait_seconds'])})",
        f"  CSAT                {c['average'] if c['average'] is not None else 'n/a'} from {c['responses']} ratings "
        f"({pct(c['satisfied_rate'])} satisfied)",
        f"  knowledge answers   {report['l1_answers']['total']}, without a citation: "
        f"{report['l1_answers']['without_citation']}" + ("" if report["checks"]["l1_answers_cited"] else "  << MUST BE 0"),
        "  deflection (turns)  " + ", ".join(f"{k} {n}" for k, n in report["deflection"]["outcomes"].items()),
        "  escalations by rule " + (", ".join(f"{k} {n}" for k, n in report["escalations_by_rule"].items()) or "none"),
    ]
    flows = (report.get("workflows") or {}).get("by_workflow") or {}
    if flows:
        lines.append("  task completion     " + ", ".join(
            f"{name} {pct(c['completion_rate'])} of {c['started']}" for name, c in flows.items()))
    kb = report.get("knowledge_base") or {}
    if kb.get("refused_updates"):
        latest = kb["latest_refusal"]
        lines.append(f"  knowledge base      {kb['refused_updates']} refused index update(s), latest "
                     f"{latest['refused_at'][:16]}: {latest['reason']}  << the index job did not apply")
    if report.get("charts"):
        lines.append("  charts              " + ", ".join(report["charts"]))
    return "\n".join(lines)
