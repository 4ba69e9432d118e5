"""Retention and erasure of customer data (PIPL / GDPR) in the router's tables; the outbox and handoff erase
their own (:mod:`router.outbox.privacy`, :mod:`handoff.privacy`).

- :func:`expire`: message texts and metadata older than the retention period are blanked, with what
  repeats them (outbox payloads of finished rows, reply texts in the stored responses, feedback
  comments, the last question kept for the repeat rule); rows, decisions, states, counts and
  timings stay, so reports and metrics over old periods keep their numbers.
- :func:`forget`: one customer, every table: texts and metadata blanked, channel routes and
  identities deleted, the customer id and conversation ids replaced by an alias nobody can map back
  (random, not a hash: a hash of a phone-number id can be reversed by trying every number).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

import handoff.privacy
from router.outbox import privacy as outbox_privacy


def expire(conn: psycopg.Connection, days: int) -> dict[str, int]:
    """Blank what customers wrote (and what echoes it) before ``now() - days``; returns rows touched per column."""
    cutoff = "now() - make_interval(days => %(days)s)"
    p = {"days": days}
    touched = {
        "messages.text": conn.execute(
            f"""UPDATE messages SET text = '', metadata = '{{}}'::jsonb
                 WHERE received_at < {cutoff} AND (text <> '' OR metadata <> '{{}}'::jsonb)""", p).rowcount,
        "turns.response": conn.execute(
            f"""UPDATE turns SET response = jsonb_set(response, '{{reply,text}}', '""')
                 WHERE created_at < {cutoff} AND response #>> '{{reply,text}}' <> ''""", p).rowcount,
    }
    touched.update(outbox_privacy.expire(conn, days))
    touched.update({
        "feedback.comment": conn.execute(
            f"UPDATE feedback SET comment = NULL WHERE created_at < {cutoff} AND comment IS NOT NULL", p).rowcount,
        "conversation_counters.last_question": conn.execute(
            f"""UPDATE conversation_counters SET last_question = NULL
                 WHERE updated_at < {cutoff} AND last_question IS NOT NULL""", p).rowcount,
    })
    touched.update(handoff.privacy.expire(conn, days))
    return touched


def forget(conn: psycopg.Connection, customer_id: str) -> dict[str, Any]:
    """Erase or anonymise one customer across every table; returns the alias and rows touched per table."""
    alias = f"forgotten:{uuid.uuid4().hex}"
    convs = [r["id"] for r in conn.execute(
        "SELECT id FROM conversations WHERE customer_id = %s FOR UPDATE", (customer_id,)).fetchall()]
    p = {"ids": convs, "cust": customer_id, "alias": alias}
    touched: dict[str, int] = {}

    def run(name: str, sql: str) -> None:
        touched[name] = conn.execute(sql, p).rowcount

    run("messages", "UPDATE messages SET text = '', metadata = '{}'::jsonb WHERE conversation_id = ANY(%(ids)s)")
    # decisions stay for the reports, without the explanation (it quotes the words a rule matched)
    run("turns", """UPDATE turns SET decision = decision - 'explanation',
                                  response = jsonb_build_object('erased', true, 'state', response -> 'state',
                                                                'turn_id', response -> 'turn_id',
                                                                'conversation_id', response -> 'conversation_id',
                                                                'decision', (response -> 'decision') - 'explanation'),
                                  trace = jsonb_build_object('erased', true, 'timings_ms', trace -> 'timings_ms',
                                                             'decision', (trace -> 'decision') - 'explanation')
                     WHERE conversation_id = ANY(%(ids)s)""")
    touched.update(outbox_privacy.forget(conn, convs))
    run("feedback", "UPDATE feedback SET comment = NULL WHERE conversation_id = ANY(%(ids)s)")
    run("conversation_counters", """UPDATE conversation_counters SET last_question = NULL
                                     WHERE conversation_id = ANY(%(ids)s)""")
    run("channel_routes", """DELETE FROM channel_routes r USING conversations c
                              WHERE c.id = ANY(%(ids)s) AND r.channel = c.channel
                                AND r.conversation_external_id = c.external_id""")
    run("channel_identities", "DELETE FROM channel_identities WHERE customer_id = %(cust)s")
    # the do-not-contact flag stays (under the alias): erasure must not make a stopped customer reachable
    run("customer_flags", "UPDATE customer_flags SET customer_id = %(alias)s, note = NULL WHERE customer_id = %(cust)s")
    run("conversations", """UPDATE conversations SET customer_id = %(alias)s, external_id = 'forgotten:' || id::text,
                                   metadata = '{}'::jsonb, updated_at = now()
                             WHERE id = ANY(%(ids)s)""")
    for name, n in handoff.privacy.forget(conn, customer_id=customer_id, conversation_ids=[str(c) for c in convs],
                                          alias=alias).items():
        touched[name] = n
    return {"customer_id": customer_id, "alias": alias, "conversations": len(convs), "touched": touched}
