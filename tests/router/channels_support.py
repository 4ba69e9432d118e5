"""Shared parts of the channel tests: a recording HTTP server standing in for the channels' APIs,
settings pointing every channel at it, and an app whose router answers every message.

The recording server is a real HTTP server on 127.0.0.1 in a thread; it can be told to fail the
first N requests (to prove retries) or always (to prove dead letters).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr

from router.outbox.store import enqueue_outbound
from router.turn.pipeline import Pipeline, TurnResult
from router.schemas import Decision, Escalation

SECRETS = {
    "web_hmac_secret": "web-shared-secret",
    "wechat_token": "wechat-token",
    "wechat_app_secret": "wechat-app-secret",
    "whatsapp_app_secret": "whatsapp-app-secret",
    "whatsapp_verify_token": "whatsapp-verify",
    "whatsapp_access_token": "whatsapp-access",
    "telegram_secret_token": "telegram-secret_token-1",
    "telegram_bot_token": "123456:ABC-DEF",
    "twilio_auth_token": "12345",
    "chatwoot_webhook_secret": "chatwoot-secret",
    "chatwoot_api_token": "chatwoot-api-token",
}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    headers: dict
    body: bytes
    at: float = 0.0     # time.monotonic() when it arrived

    def json(self):
        return json.loads(self.body)

    def form(self):
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class RecordingServer:
    """Records every request; ``fail_next`` requests answer ``fail_status``; paths map to JSON answers."""

    requests: list[Recorded] = field(default_factory=list)
    fail_next: int = 0
    fail_always: bool = False
    fail_status: int = 500
    fail_match: bytes | None = None               # only requests whose body contains this count for fail_next
    answers: dict = field(default_factory=dict)   # path suffix -> (status, json[, headers]) or f(Recorded) -> that

    def __post_init__(self):
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                rec = Recorded(self.command, parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()},
                               {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                with server._lock:
                    server.requests.append(rec)
                    eligible = server.fail_match is None or server.fail_match in body
                    failing = server.fail_always or (server.fail_next > 0 and eligible)
                    if server.fail_next > 0 and eligible:
                        server.fail_next -= 1
                extra = {}
                if failing:
                    status, payload = server.fail_status, {"error": "induced failure"}
                else:
                    status, payload = 200, {"ok": True}
                    for suffix, answer in server.answers.items():
                        if parts.path.endswith(suffix):
                            status, payload, extra = (*(answer(rec) if callable(answer) else answer), {})[:3]
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _handle
            do_POST = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def sent(self, path_suffix: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]


def channel_settings(settings, server_url: str, **overrides):
    """The test settings with every channel enabled and every channel API at the recording server."""
    update = {k: SecretStr(v) for k, v in SECRETS.items()}
    update.update({
        "wechat_app_id": "wx-app", "twilio_account_sid": "AC123", "chatwoot_api_url": server_url,
        "chatwoot_account_id": 1,
        "web_api_base_url": f"{server_url}/web-callback", "wechat_api_base_url": server_url,
        "whatsapp_api_base_url": f"{server_url}/v21.0", "telegram_api_base_url": server_url,
        "twilio_api_base_url": server_url, "dispatcher_enabled": False,
        "outbox_backoff_base_seconds": 0.05, "outbox_backoff_max_seconds": 0.2, "outbox_max_attempts": 3,
        "outbox_rate_limits": {ch: 1000.0 for ch in ("web", "wechat", "whatsapp", "telegram", "sms", "chatwoot")},
    })
    update.update(overrides)
    return settings.model_copy(update=update)


def answering_decider(ctx) -> TurnResult:
    """A router stand-in at the pipeline's seam: asks for a human -> L3, anything else -> an L1 echo.

    Like the real router it writes its reply to the outbox in the turn's transaction.
    """
    text = ctx.inbound.text
    if "human" in text.lower() or "人工" in text:
        decision = Decision(intent="human_agent", tier="L3", channel="rules",
                            escalation=Escalation(rule="asks_for_human", reason="customer asked for a human"))
        reply, state = "Connecting you to an agent.", "l3_queuing"
    else:
        decision = Decision(intent="faq", tier="L1", channel="rules")
        reply, state = f"echo: {text}", "l1_resolved"
    enqueue_outbound(ctx.conn, conversation_id=ctx.conversation["id"], channel=ctx.conversation["channel"], text=reply)
    return TurnResult(decision=decision, state=state, reply={"text": reply, "citations": []})


def reply_decider(make_reply):
    """An L1 decider whose reply is ``make_reply(inbound text)``, queued in the turn like the router's."""
    def decide(ctx) -> TurnResult:
        reply = make_reply(ctx.inbound.text)
        enqueue_outbound(ctx.conn, conversation_id=ctx.conversation["id"], channel=ctx.conversation["channel"],
                         text=reply)
        return TurnResult(decision=Decision(intent="faq", tier="L1", channel="rules"), state="l1_resolved",
                          reply={"text": reply, "citations": []})
    return decide


@contextmanager
def channel_app(settings, decider=answering_decider):
    """Services on this test's database with the given decider, and a TestClient of the app."""
    from fastapi.testclient import TestClient

    from router.app.factory import create_app
    from router.outbox import build_dispatcher
    from router.app.composition import build_services

    services = build_services(settings, load_models=False)
    # the pool as the gateway keeps it (settings.db_pool_min, filled before the first request): a one-off
    # command's single connection grows one at a time, and a burst would wait on that growth, not on the gateway
    services.pool.resize(settings.db_pool_min, settings.db_pool_max)
    services.pool.wait(30)
    services.pipeline = Pipeline(services.pool, services.metrics, decider=decider)
    dispatcher = build_dispatcher(settings, services.pool, services.metrics)
    try:
        with TestClient(create_app(services=services)) as client:
            yield client, services, dispatcher
    finally:
        dispatcher.close()
        services.close()


def count(services, sql: str, *args) -> int:
    with services.pool.connection() as conn:
        return conn.execute(sql, args).fetchone()["n"]


def stored(services) -> dict[str, int]:
    """How many rows the ingress path writes, by table: all zero after a rejected delivery."""
    with services.pool.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"]
                for t in ("conversations", "messages", "turns", "outbox", "channel_identities", "channel_routes")}


def post_concurrently(client, url: str, body, headers: dict, n: int = 5) -> list:
    """The same delivery posted ``n`` times at once, as a channel retrying impatiently would."""
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(client.post(url, content=body, headers=headers)))
               for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# WhatsApp Cloud API: the send endpoint's answer (one message id) and a body signed like Meta's webhooks
WHATSAPP_SENT = {"/messages": (200, {"messaging_product": "whatsapp",
                                     "contacts": [{"input": "16505551234", "wa_id": "16505551234"}],
                                     "messages": [{"id": "wamid.OUT"}]})}


def whatsapp_signed(payload) -> tuple[bytes, dict]:
    body = json.dumps(payload).encode()
    sig = hmac.new(SECRETS["whatsapp_app_secret"].encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"}


@pytest.fixture(name="recorder")
def whatsapp_recorder():
    """A recording server answering WhatsApp's send endpoint (import it into a test module as ``recorder``)."""
    server = RecordingServer(answers=dict(WHATSAPP_SENT))
    yield server
    server.close()
