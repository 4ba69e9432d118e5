"""A slow shop must not slow the gateway's HTTP face: turns waiting on the shop hold a thread each, and those
threads are not the ones every other request needs. Real gateway served by uvicorn over real HTTP, real router,
the example shop over MCP stdio (hanging), real Postgres."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import json
import time

import httpx
import pytest
from pydantic import SecretStr

from keys_testkit import issue_integration_key
from routing_kit import flow_services
from serving_testkit import pool_idle, served

pytestmark = pytest.mark.slow

SECRET = "turn-threads-secret"
#: order questions at once: more than anyio's default limiter (40 threads), on which every request of the app,
#: a greeting's included, waited for a thread while these waited for the shop
ORDERS = 48
#: the turns' tool deadline (s): the order turns are still waiting on the hanging shop when the greetings are sent
DEADLINE = 30


@pytest.fixture
def live(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch, tmp_path):
    """The gateway with the router and the workflows on a shop that never answers; yields (base URL, services).

    The bundled tools file with the reads' timeout (3 s) raised to the turns' tool deadline, itself long: the order
    turns are still waiting when the greetings are checked. The admission's per-channel cap (64) lets every order
    question run."""
    from automation.tools.config import BUNDLED_TOOLS
    from router.app.factory import create_app

    text = BUNDLED_TOOLS.read_text(encoding="utf-8")
    assert "timeout: 3\n" in text
    tools = tmp_path / "tools.yaml"
    tools.write_text(text.replace("timeout: 3\n", f"timeout: {DEADLINE}\n"), encoding="utf-8")
    monkeypatch.setenv("SWITCHBOARD_SHOP_HANG", "1")
    monkeypatch.setenv("SWITCHBOARD_TOOL_DEADLINE_SECONDS", str(DEADLINE))
    svc = flow_services(fresh_db, pg_server, template_dsn, e5_encoder, web_hmac_secret=SecretStr(SECRET),
                        tools_file=tools)
    assert svc.tools.check(timeout=60) == {}      # the shop is up (it lists its tools); no call ever returns
    with served(create_app(services=svc), stop_timeout=60) as base:
        yield base, svc
    svc.close()


def _signed(conversation: str, customer: str, message_id: str, text: str) -> tuple[bytes, dict]:
    body = json.dumps({"conversation_id": conversation, "customer_id": customer, "message_id": message_id,
                       "text": text}).encode()
    ts = str(int(time.time()))
    sig = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", "X-Switchboard-Signature": f"sha256={sig}",
                  "X-Switchboard-Timestamp": ts}


def test_greetings_are_answered_while_more_order_turns_than_the_default_threads_wait_on_a_hanging_shop(live):
    base, svc = live
    key = issue_integration_key(svc.pool, ("web",))

    async def scenario() -> tuple[list[httpx.Response], httpx.Response, httpx.Response, int]:
        url = f"{base}/v1/channels/web/webhook"
        limits = httpx.Limits(max_connections=ORDERS + 4, max_keepalive_connections=ORDERS + 4)
        async with httpx.AsyncClient(limits=limits, timeout=180) as client:
            orders = [asyncio.create_task(client.post(url, content=body, headers=headers))
                      for body, headers in (_signed(f"order-c{k}", f"order-u{k}", f"order-m{k}",
                                                    f"where is my order 1002{k:02d}") for k in range(ORDERS))]
            # every order question has a thread and runs its turn (it decides it needs the shop and waits for it,
            # holding nothing); on too few threads the rest would wait for one until the first ones' deadline
            until = time.monotonic() + DEADLINE - 5     # within the deadline: no order turn has ended
            while svc.pipeline.admission.running() < ORDERS:
                assert time.monotonic() < until, f"only {svc.pipeline.admission.running()} order turns got a thread"
                await asyncio.sleep(0.05)
            # every order turn has run its pass and waits outside the database
            assert await asyncio.to_thread(pool_idle, svc.pool, quiet_for=0.3, timeout=120.0), "the pool never idled"
            assert not any(t.done() for t in orders), [t.result().text for t in orders if t.done()][:1]
            body, headers = _signed("hello-c", "hello-u", "hello-m", "hello")
            hello = await client.post(url, content=body, headers=headers)
            direct = await client.post(f"{base}/v1/messages", headers={"Authorization": f"Bearer {key}"},
                                       json={"channel": "web", "conversation_id": "hi-c", "customer_id": "hi-u",
                                             "message_id": "hi-m", "text": "你好"})
            # both were answered while every order turn still waits on the shop
            pending = sum(not t.done() for t in orders)
            return await asyncio.gather(*orders), hello, direct, pending

    # on a thread of its own: the browser tests' Playwright keeps an event loop running on the main thread for the
    # rest of the session, where asyncio.run refuses to start another
    with concurrent.futures.ThreadPoolExecutor(1) as apart:
        orders, hello, direct, pending = apart.submit(asyncio.run, scenario()).result()
    assert pending == ORDERS
    assert hello.status_code == 200 and hello.json()["reply"]["text"], hello.text
    assert direct.status_code == 200 and direct.json()["reply"]["text"], direct.text
    # and once their deadline passed, every order turn answered truthfully: nothing claimed, nothing lost
    assert [r.status_code for r in orders] == [200] * ORDERS
    texts = [r.json()["reply"]["text"] for r in orders]
    assert all("not answering" in t and "shipped" not in t for t in texts), texts[:3]
