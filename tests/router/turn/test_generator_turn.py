"""The optional answer generator in a real turn: it runs with no conversation lock and no pooled
connection held, on masked input, within its own concurrency limit; the decision is made again under
the lock and the generated text is used only for the same question and evidence."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest

from router.schemas import InboundMessage
from routing_kit import kb_template, routing_services, rows

pytestmark = pytest.mark.slow

QUESTION = "how long does a refund take to reach my card? write to jane.doe@example.com"


class _SlowChat(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that waits for the test's signal, then answers with passage [1]."""

    entered = threading.Event()
    release = threading.Event()
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _SlowChat.seen.append(body)
        _SlowChat.entered.set()
        _SlowChat.release.wait(20)
        content = body["messages"][1]["content"]
        first = content.split("[1] ", 1)[1].split("\n\n[2]", 1)[0].split("\n\nQuestion:", 1)[0]
        # every sentence comes from the passage, so the knowledge base's support check keeps it
        reply = " ".join(line.strip() for line in first.splitlines() if line.strip())
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _SlowChat.seen = []
    _SlowChat.entered.clear()
    _SlowChat.release.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    _SlowChat.release.set()
    server.shutdown()


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder, chat_endpoint):
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    # one pooled connection: a turn that kept it while generating would starve every other turn
    s = routing_services(fresh_db(name), home, e5_encoder, kb_dir, rag_generator_url=chat_endpoint,
                         rag_generator_model="stub", rag_generator_timeout_seconds=20, rag_generator_concurrency=1,
                         db_pool_min=1, db_pool_max=1, db_acquire_timeout=1.0)
    yield s
    s.close()


def _msg(conv: str, mid: str, text: str) -> InboundMessage:
    return InboundMessage(channel="web", conversation_external_id=conv, customer_id=f"u-{conv}",
                          message_external_id=mid, text=text)


def _in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _checked_out(pool) -> int:
    stats = pool.get_stats()
    return stats.get("pool_size", 0) - stats.get("pool_available", 0)


def test_a_slow_generator_holds_no_lock_and_no_connection(svc, dsn):
    svc.pipeline.handle(_msg("c-a", "a-0", "hello"))      # the conversation row exists: its lock can be probed
    t, out = _in_thread(svc.pipeline.handle, _msg("c-a", "a-1", QUESTION))
    assert _SlowChat.entered.wait(30), out
    try:
        # the conversation is not locked: another session takes its row lock without waiting
        with psycopg.connect(svc.dsn) as probe:
            probe.execute("SET lock_timeout = '200ms'")
            probe.execute("SELECT id FROM conversations WHERE external_id = 'c-a' FOR UPDATE").fetchone()
            probe.rollback()
            idle_in_tx = probe.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND state LIKE 'idle in transaction%%'").fetchone()[0]
        assert idle_in_tx == 0
        # no pooled connection is checked out, and another conversation is served through the one connection
        assert _checked_out(svc.pool) == 0 and _checked_out(svc.rag.pool) == 0
        t0 = time.monotonic()
        other, _ = svc.pipeline.handle(_msg("c-b", "b-1", "hello"))
        assert other["decision"] is not None and time.monotonic() - t0 < 15
        # the concurrency limit (1 slot, taken): a knowledge-base question keeps its extractive answer at once
        third, _ = svc.pipeline.handle(_msg("c-c", "c-1", "how long does a refund take to reach my card?"))
        assert third["decision"]["tier"] == "L1" and third["reply"]["text"]
        assert len(_SlowChat.seen) == 1
        [trace] = rows(svc.pool, "SELECT t.trace FROM turns t JOIN messages m ON m.id = t.message_id "
                                 "WHERE m.external_id = 'c-1'")
        assert "generator" in trace["trace"]["rag"]["reason"]
        assert "a-1" not in {r["external_id"] for r in rows(svc.pool, "SELECT external_id FROM messages")}
    finally:
        _SlowChat.release.set()
        t.join(60)
    assert "error" not in out, out.get("error")
    response, replayed = out["value"]
    assert not replayed and response["decision"]["tier"] == "L1"
    [request] = _SlowChat.seen
    sent = request["messages"][1]["content"]
    assert "jane.doe@example.com" not in sent and "Question:" in sent       # masked before it left
    generated = response["reply"]["text"]
    assert generated and generated in " ".join(sent.split())                # the generator's text was used
    # stored once: one message, one turn, one outbound reply carrying the generated text
    stored = rows(svc.pool, "SELECT m.id, t.trace FROM messages m JOIN turns t ON t.message_id = m.id "
                            "WHERE m.external_id = 'a-1'")
    assert len(stored) == 1 and stored[0]["trace"]["rag"]["reason"] is None
    outbox = rows(svc.pool, "SELECT payload FROM outbox o JOIN conversations c ON c.id = o.conversation_id "
                            "WHERE c.external_id = 'c-a' AND o.kind = 'reply' ORDER BY o.id")
    assert outbox[-1]["payload"]["text"] == generated
    # a retry of the same message id replays the stored response and calls nothing
    again, replayed = svc.pipeline.handle(_msg("c-a", "a-1", QUESTION))
    assert replayed and again == response and len(_SlowChat.seen) == 1


def test_a_decision_changed_while_generating_does_not_use_the_generated_text(svc):
    t, out = _in_thread(svc.pipeline.handle, _msg("c-d", "d-1", QUESTION))
    assert _SlowChat.entered.wait(30), out
    try:
        # meanwhile the customer asks for a person in the same conversation (not blocked: no lock is held)
        human, _ = svc.pipeline.handle(_msg("c-d", "d-2", "I want to talk to a human"))
        assert human["decision"]["tier"] == "L3" and human["ticket_id"]
    finally:
        _SlowChat.release.set()
        t.join(60)
    assert "error" not in out, out.get("error")
    response, _ = out["value"]
    # decided again under the lock: a person holds the conversation now, so the bot does not answer
    assert response["decision"]["tier"] != "L1" or response["reply"] is None
    assert len(_SlowChat.seen) == 1
    texts = [r["payload"]["text"] for r in rows(
        svc.pool, "SELECT payload FROM outbox o JOIN conversations c ON c.id = o.conversation_id "
                  "WHERE c.external_id = 'c-d' ORDER BY o.id")]
    content = _SlowChat.seen[0]["messages"][1]["content"]
    flat = " ".join(content.split())
    assert not any(x and len(x) > 40 and " ".join(x.split()) in flat for x in texts)   # no answer from the passages
