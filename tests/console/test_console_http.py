"""The console's HTTP side: its page and assets with a strict CSP, and the conversation read for agents."""

from __future__ import annotations

import uuid

from handoff import agents as store


def _token(services, name="kim", teams=("general",)):
    with services.pool.connection() as conn:
        store.add_agent(conn, name, teams=teams, actor="test")
        return store.issue_token(conn, name, actor="test")[0]


def _wire(services):
    from handoff import HandoffService
    from router.turn.state import ConversationStatePort

    services.handoff = HandoffService(services.pool, ConversationStatePort())


def test_page_and_assets_carry_a_strict_content_security_policy(client):
    page = client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    for part in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
                 "object-src 'none'", "base-uri 'none'"):
        assert part in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text and "style=" not in page.text and " on" + "click=" not in page.text
    assert '<script type="module" src="/console/static/console.js">' in page.text
    for name, media in (("console.js", "text/javascript"), ("console.css", "text/css"), ("favicon.svg", "image/svg")):
        r = client.get(f"/console/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media), name
        assert r.headers["content-security-policy"] == csp
    js = client.get("/console/static/console.js").text
    assert "innerHTML" not in js and "eval(" not in js and "http://" not in js and "https://" not in js


def test_only_the_shipped_assets_are_served(client):
    for name in ("routes.py", "..%2Froutes.py", "index.html.bak", "nope.js"):
        r = client.get(f"/console/static/{name}")
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json", name


def test_the_conversation_read_needs_a_token_that_sees_the_ticket(client, services):
    _wire(services)
    ana, other = _token(services, "ana"), _token(services, "ola", teams=("billing",))
    with services.pool.connection() as conn, conn.transaction():
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id, state) "
                            "VALUES ('web', %s, 'u1', 'l3_queuing') RETURNING id", (f"c-{uuid.uuid4().hex[:6]}",)
                            ).fetchone()["id"]
        ticket = services.handoff.open_ticket(conn, kind="handoff", conversation_id=str(conv), channel="web",
                                              customer_id="u1", reason="asks_for_human", context={})
    url = f"/console/api/tickets/{ticket['id']}/conversation"
    assert client.get(url).status_code == 401
    assert client.get(url, headers={"Authorization": "Bearer sbt_nope"}).status_code == 401
    assert client.get(url, headers={"Authorization": f"Bearer {other}"}).status_code == 403
    assert client.get(f"/console/api/tickets/{uuid.uuid4()}/conversation",
                      headers={"Authorization": f"Bearer {ana}"}).status_code == 404
    h = {"Authorization": f"Bearer {ana}"}
    client.post(f"/v1/handoff/tickets/{ticket['id']}/claim", headers=h)
    sent = client.post(f"/v1/handoff/tickets/{ticket['id']}/messages", headers={**h, "Idempotency-Key": "k-1"},
                       json={"text": "Hello, Ana here."})
    assert sent.status_code == 200, sent.text
    again = client.post(f"/v1/handoff/tickets/{ticket['id']}/messages", headers={**h, "Idempotency-Key": "k-1"},
                        json={"text": "Hello, Ana here."})
    assert again.headers.get("idempotent-replayed") == "true"
    body = client.get(url, headers=h).json()
    assert [(m["sender"], m["text"]) for m in body["messages"]] == [("agent", "Hello, Ana here.")]
    assert [(o["kind"], o["text"], o["status"]) for o in body["outbox"]] == [("agent_message", "Hello, Ana here.",
                                                                              "pending")]
