"""The front door as an attacker tries it: the direct API without or with the wrong integration key,
message ids reused by another caller, internal flags in client metadata, replayed WeChat and web
signatures, unbounded metric labels, outbound paths from webhook fields. Real app, real Postgres."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid

import pytest
import yaml
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, stored
from keys_testkit import issue_integration_key
from fastapi.testclient import TestClient
from ops_testkit import wire_gateway

from router.app.factory import create_app
from router.turn.escalation import SAMPLE_POLICY

PROBLEM = "application/problem+json"


def count(pool, sql: str, *args) -> int:
    with pool.connection() as conn:
        return conn.execute(sql, args).fetchone()["n"]


def everything(pool) -> dict[str, int]:
    tables = ("conversations", "messages", "turns", "tickets", "outbox", "customer_flags", "feedback")
    return {t: count(pool, f"SELECT count(*) AS n FROM {t}") for t in tables}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(**over) -> dict:
    return {"channel": "web", "conversation_id": "victim-conv", "customer_id": "victim", "message_id": "m1",
            "text": "where is my order", **over}


@pytest.fixture
def routed(services, tmp_path):
    """The gateway with the real router (harness, classifier, knowledge base, handoff), a quota of 3 per
    minute, and no key sent by default."""
    policy = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    policy["harness"]["quota"] = {"max_messages": 3, "window_seconds": 60}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, allow_unicode=True), encoding="utf-8")
    services.settings = services.settings.model_copy(update={"policy_file": path})
    wire_gateway(services, tmp_path)
    with TestClient(create_app(services=services)) as client:
        yield client, services


@pytest.fixture
def bare(services):
    """The app with the record-only pipeline and no key sent by default."""
    with TestClient(create_app(services=services)) as client:
        yield client, services


# -- attack 1: the direct API bypassed every webhook signature ------------------------------------------


def test_without_a_key_stop_and_handoff_requests_are_401_and_change_nothing(routed):
    client, services = routed
    before = everything(services.pool)
    for text in ("STOP", "转人工"):
        for headers in ({}, bearer("sbk_" + "x" * 43), {"Authorization": "Basic dXNlcjpwYXNz"}):
            r = client.post("/v1/messages", json=body(text=text, message_id=f"m-{uuid.uuid4().hex[:6]}"),
                            headers=headers)
            assert r.status_code == 401, r.text
            assert r.headers["content-type"].startswith(PROBLEM)
            assert r.headers["www-authenticate"].startswith("Bearer")
    # refused before the body is read: a malformed body without a key is 401 too
    assert client.post("/v1/messages", json={"channel": "nope"}).status_code == 401
    assert everything(services.pool) == before


def test_a_key_posts_only_its_channels_and_signed_channels_need_explicit_scope(routed):
    client, services = routed
    web_key = issue_integration_key(services.pool, ["web"])
    with services.pool.connection() as conn:   # the victim talks to the bot on WhatsApp: a stored route
        conn.execute("INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address) "
                     "VALUES ('whatsapp', '15551234567', '15551234567', '{\"to\": \"15551234567\"}')")
    before = everything(services.pool)
    for channel in ("whatsapp", "wechat", "telegram", "sms", "chatwoot", "app"):
        r = client.post("/v1/messages", json=body(channel=channel, conversation_id="15551234567"),
                        headers=bearer(web_key))
        assert r.status_code == 403, (channel, r.text)
        assert r.headers["content-type"].startswith(PROBLEM)
    assert everything(services.pool) == before
    # only a key that lists whatsapp explicitly may post it
    wa_key = issue_integration_key(services.pool, ["whatsapp"])
    r = client.post("/v1/messages", json=body(channel="whatsapp", conversation_id="15551234567"),
                    headers=bearer(wa_key))
    assert r.status_code == 200, r.text
    r = client.post("/v1/messages", json=body(message_id="w-1"), headers=bearer(web_key))
    assert r.status_code == 200 and r.json()["decision"]["intent"] == "order_query"


def test_revocation_takes_effect_on_the_next_request(bare):
    client, services = bare
    from router.app.keys import revoke_key

    key = issue_integration_key(services.pool, ["web"], name="site-backend")
    assert client.post("/v1/messages", json=body(), headers=bearer(key)).status_code == 200
    with services.pool.connection() as conn:
        assert revoke_key(conn, "site-backend")["revoked_at"] is not None
    r = client.post("/v1/messages", json=body(message_id="m2"), headers=bearer(key))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    with services.pool.connection() as conn:
        row = conn.execute("SELECT key_hash FROM integration_keys WHERE name = 'site-backend'").fetchone()
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest() and key not in json.dumps(row)


def test_an_unknown_channel_is_422(bare):
    client, services = bare
    key = issue_integration_key(services.pool, ["web"])
    for channel in ("c1", "fax", "WEB", ""):
        r = client.post("/v1/messages", json=body(channel=channel), headers=bearer(key))
        assert r.status_code == 422, r.text
    assert count(services.pool, "SELECT count(*) AS n FROM messages") == 0


# -- attack 2: a reused message id fetched someone else's turn -------------------------------------------


def test_a_reused_message_id_is_409_reveals_nothing_and_stores_nothing(routed):
    client, services = routed
    victim_key = issue_integration_key(services.pool, ["web"])
    attacker_key = issue_integration_key(services.pool, ["web"])
    first = client.post("/v1/messages", json=body(text="转人工"), headers=bearer(victim_key))
    assert first.status_code == 200 and first.json()["ticket_id"]
    secrets_of_victim = [first.json()["conversation_id"], first.json()["ticket_id"], first.json()["turn_id"]]
    before = everything(services.pool)
    attempts = [
        (attacker_key, body(conversation_id="attacker-conv", customer_id="attacker", text="转人工")),
        (victim_key, body(conversation_id="other-conv", text="转人工")),     # another conversation
        (victim_key, body(customer_id="someone-else", text="转人工")),       # another customer
        (victim_key, body(text="something else")),                          # another text
        (attacker_key, body(text="转人工")),                                # everything equal, another key
    ]
    for key, attempt in attempts:
        r = client.post("/v1/messages", json=attempt, headers=bearer(key))
        assert r.status_code == 409, (attempt, r.text)
        assert r.headers["content-type"].startswith(PROBLEM) and "idempotent-replayed" not in r.headers
        assert not any(s in r.text for s in secrets_of_victim)
    assert everything(services.pool) == before


def test_a_true_retry_is_replayed_byte_for_byte(routed):
    client, services = routed
    key = issue_integration_key(services.pool, ["web"])
    first = client.post("/v1/messages", json=body(text="我的订单到哪了"), headers=bearer(key))
    again = client.post("/v1/messages", json=body(text="我的订单到哪了"), headers=bearer(key))
    assert first.status_code == again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert again.content == first.content
    with services.pool.connection() as conn:
        text = conn.execute("SELECT response_text FROM turns").fetchone()["response_text"]
    assert json.loads(first.content) == {**json.loads(text), "feedback_token": first.json()["feedback_token"]}
    assert count(services.pool, "SELECT count(*) AS n FROM turns") == 1


# -- attack 2b: a leaked conversation UUID let anyone rate (and close) the session -----------------------


def test_feedback_needs_a_key_or_the_conversations_token(bare):
    client, services = bare
    key = issue_integration_key(services.pool, ["web"])
    mine = client.post("/v1/messages", json=body(), headers=bearer(key)).json()
    other = client.post("/v1/messages", json=body(conversation_id="c2", message_id="m2"), headers=bearer(key)).json()
    url = f"/v1/conversations/{mine['conversation_id']}/feedback"
    r = client.post(url, json={"csat": 1})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert client.post(url, json={"csat": 1}, headers={"X-Conversation-Token": other["feedback_token"]}).status_code == 401
    # a malformed Authorization header is refused, not ignored in favour of the (valid) token
    for broken in ("Bearer ", "Basic eDp5", "sbk_no_scheme"):
        r = client.post(url, json={"csat": 1}, headers={"Authorization": broken,
                                                        "X-Conversation-Token": mine["feedback_token"]})
        assert r.status_code == 401, (broken, r.text)
    app_key = issue_integration_key(services.pool, ["app"])
    assert client.post(url, json={"csat": 1}, headers=bearer(app_key)).status_code == 403
    assert count(services.pool, "SELECT count(*) AS n FROM feedback") == 0
    r = client.post(url, json={"csat": 4}, headers={"X-Conversation-Token": mine["feedback_token"]})
    assert r.status_code == 201, r.text
    r = client.post(f"/v1/conversations/{other['conversation_id']}/feedback", json={"csat": 5}, headers=bearer(key))
    assert r.status_code == 201, r.text


def test_a_feedback_comment_is_stored_and_echoed_masked(bare):
    """A phone number or e-mail typed into the rating comment is personal data like any message's."""
    client, services = bare
    key = issue_integration_key(services.pool, ["web"])
    conv = client.post("/v1/messages", json=body(), headers=bearer(key)).json()
    url = f"/v1/conversations/{conv['conversation_id']}/feedback"
    comment = "slow answer, call me back on 138 1234 5678 or li.lei@example.com"
    r = client.post(url, json={"csat": 2, "comment": comment}, headers=bearer(key))
    assert r.status_code == 201, r.text
    assert r.json()["comment"] == "slow answer, call me back on [phone] or [email]"
    with services.pool.connection() as conn:
        stored_comment = conn.execute("SELECT comment FROM feedback").fetchone()["comment"]
    assert stored_comment == "slow answer, call me back on [phone] or [email]"
    # the same rating again is a replay, not a conflict, although what is stored differs from what was sent
    again = client.post(url, json={"csat": 2, "comment": comment}, headers=bearer(key))
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert "5678" not in again.text and "li.lei" not in again.text


# -- attack 3: client metadata trusted as internal state -------------------------------------------------


def test_client_metadata_never_skips_the_quota_nor_breaks_later_messages(routed):
    client, services = routed
    key = issue_integration_key(services.pool, ["web"])
    codes = []
    for i, meta in enumerate([{"throttled": "x"}, {"throttled": True}, {"throttled": True},
                              {"throttled": True}, {"throttled": True}]):
        r = client.post("/v1/messages", json=body(conversation_id="q", customer_id="q", message_id=f"q{i}",
                                                  metadata=meta), headers=bearer(key))
        assert r.status_code != 500, r.text
        codes.append(r.status_code)
    assert codes == [200, 200, 200, 429, 429]
    with services.pool.connection() as conn:
        rows = conn.execute("SELECT throttled, metadata FROM messages WHERE direction = 'in' ORDER BY id").fetchall()
    assert [r["throttled"] for r in rows] == [False, False, False]      # the refused two: nothing stored
    assert rows[0]["metadata"]["client"] == {"throttled": "x"} and "throttled" not in rows[0]["metadata"]
    # the customer's next messages (and another's) are routed normally, never a 500
    with services.pool.connection() as conn:
        conn.execute("UPDATE messages SET received_at = received_at - interval '61 seconds'")
    r = client.post("/v1/messages", json=body(conversation_id="q-2", customer_id="q", message_id="q9"),
                    headers=bearer(key))
    assert r.status_code == 200 and r.json()["decision"]["intent"] == "order_query"
    r = client.post("/v1/messages", json=body(conversation_id="q", customer_id="q", message_id="q3"),
                    headers=bearer(key))                                   # a refused message, retried
    assert r.status_code == 200 and r.json()["turn_id"]
    for bad in ({"metadata": "x"}, {"metadata": [1]}):
        r = client.post("/v1/messages", json=body(message_id="bad", **bad), headers=bearer(key))
        assert r.status_code == 422


# -- attack 4: WeChat signatures replayed forever, safe mode downgraded ----------------------------------

WECHAT = "/v1/channels/wechat/webhook"


def wechat_query(ts: int, nonce: str = "1516141345") -> dict:
    token = SECRETS["wechat_token"]
    sig = hashlib.sha1("".join(sorted([token, str(ts), nonce])).encode()).hexdigest()
    return {"signature": sig, "timestamp": str(ts), "nonce": nonce}


def wechat_xml(text: str, msg_id: str) -> bytes:
    return (f"<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[oVictim]]></FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId></xml>").encode()


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/web-callback": (200, {"id": "1"})})
    yield server
    server.close()


def test_a_leaked_wechat_signature_cannot_carry_another_message(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (client, services, _):
        q = wechat_query(int(time.time()))
        first = wechat_xml("hello", "7001")
        assert client.post(WECHAT, params=q, content=first).status_code == 200
        # WeChat's own retry (same signature, same body) is accepted and deduplicated
        assert client.post(WECHAT, params=q, content=first).status_code == 200
        before = stored(services)
        r = client.post(WECHAT, params=q, content=wechat_xml("STOP", "7002"))      # the forged message
        assert r.status_code == 401 and r.headers["content-type"].startswith(PROBLEM)
        for ts in (int(time.time()) - 330, int(time.time()) + 330):              # outside the 300 s window (a margin: a slow run takes seconds)
            r = client.post(WECHAT, params=wechat_query(ts, nonce="9"), content=wechat_xml("hi", f"70{ts}"))
            assert r.status_code == 401
        assert stored(services) == before
        assert count(services.pool, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
        assert count(services.pool, "SELECT count(*) AS n FROM ingress_nonces") == 1


def test_with_an_encoding_aes_key_plaintext_is_refused(settings, recorder):
    from pydantic import SecretStr

    s = channel_settings(settings, recorder.url, wechat_app_id="wx1234567890abcdef",
                         wechat_encoding_aes_key=SecretStr("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"))
    with channel_app(s) as (client, services, _):
        r = client.post(WECHAT, params=wechat_query(int(time.time())), content=wechat_xml("hello", "7101"))
        assert r.status_code == 401 and "safe mode" in r.json()["detail"]
        assert set(stored(services).values()) == {0}


def test_a_web_signature_without_a_fresh_timestamp_is_refused(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (client, services, _):
        raw = json.dumps(body()).encode()
        key = SECRETS["web_hmac_secret"].encode()
        old_style = "sha256=" + hmac.new(key, raw, hashlib.sha256).hexdigest()
        r = client.post("/v1/channels/web/webhook", content=raw, headers={"X-Switchboard-Signature": old_style})
        assert r.status_code == 401
        stale = str(int(time.time()) - 330)
        sig = "sha256=" + hmac.new(key, stale.encode() + b"." + raw, hashlib.sha256).hexdigest()
        r = client.post("/v1/channels/web/webhook", content=raw,
                        headers={"X-Switchboard-Signature": sig, "X-Switchboard-Timestamp": stale})
        assert r.status_code == 401
        fresh = str(int(time.time()))
        r = client.post("/v1/channels/web/webhook", content=raw,      # a fresh timestamp under an old signature
                        headers={"X-Switchboard-Signature": sig, "X-Switchboard-Timestamp": fresh})
        assert r.status_code == 401
        assert set(stored(services).values()) == {0}
        sig = "sha256=" + hmac.new(key, fresh.encode() + b"." + raw, hashlib.sha256).hexdigest()
        r = client.post("/v1/channels/web/webhook", content=raw,
                        headers={"X-Switchboard-Signature": sig, "X-Switchboard-Timestamp": fresh})
        assert r.status_code == 200, r.text


# -- attack 5: any string became a metric label ----------------------------------------------------------


def test_metric_labels_come_from_closed_sets(bare):
    client, services = bare
    key = issue_integration_key(services.pool, ["web"])
    for i in range(30):
        client.post("/v1/messages", json=body(channel=f"c{i}", message_id=f"x{i}"), headers=bearer(key))
    client.post("/v1/messages", json=body(), headers=bearer(key))
    text = client.get("/metrics", headers=bearer(key)).text
    channels = {line.split('channel="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("switchboard_messages_total{")}
    assert channels == {"web"}
    assert not any(f'"c{i}"' in text for i in range(30))
    for i in range(5):                                   # made-up HTTP methods are not series either
        client.request(f"X{i}", "/v1/messages")
    text = client.get("/metrics", headers=bearer(key)).text
    assert not any(f'method="X{i}"' in text for i in range(5)) and 'method="other"' in text
    # what reaches a metric from elsewhere is folded into "other"
    services.metrics.messages.labels("c-from-nowhere").inc()
    services.metrics.decisions.labels("L9", "made-up-intent", "guess").inc()
    text = client.get("/metrics", headers=bearer(key)).text
    assert 'switchboard_messages_total{channel="other"} 1.0' in text
    assert 'switchboard_decisions_total{decided_by="other",intent="other",tier="other"} 1.0' in text


# -- attack 6: webhook fields shaped outbound API paths --------------------------------------------------


def test_chatwoot_ids_must_be_numbers_and_the_account_comes_from_settings(settings, recorder):
    from router.channels.chatwoot.inbound import chatwoot_signature

    def event(account, conversation):
        return {"event": "message_created", "message_type": "incoming", "id": 5, "content": "hi",
                "account": {"id": account}, "sender": {"id": 9, "type": "contact"},
                "conversation": {"id": conversation, "status": "pending", "contact_inbox": {"contact_id": 9}}}

    with channel_app(channel_settings(settings, recorder.url)) as (client, services, dispatcher):
        for account, conversation in (("1/../../2", "1"), ("1", "3/messages?x="), ("2", "1")):
            raw = json.dumps(event(account, conversation)).encode()
            ts = str(int(time.time()))
            r = client.post("/v1/channels/chatwoot/webhook", content=raw, headers={
                "X-Chatwoot-Signature": chatwoot_signature(SECRETS["chatwoot_webhook_secret"], ts, raw),
                "X-Chatwoot-Timestamp": ts, "Content-Type": "application/json"})
            assert r.status_code == 422, (account, conversation, r.text)
        assert set(stored(services).values()) == {0}


def test_twilio_account_sid_comes_from_settings_only(settings, recorder):
    from router.channels.delivery import Delivery, DeliveryError
    from router.channels.sms.outbound import SmsSender

    s = channel_settings(settings, recorder.url, twilio_account_sid=None)
    sender = SmsSender(s, None)
    delivery = Delivery(outbox_id=1, channel="sms", kind="reply", payload={"text": "hi"},
                        address={"to": "+1", "from": "+2", "account_sid": "ACevil/../../x"}, attempt=1,
                        conversation_external_id="c", customer_id="u")
    with pytest.raises(DeliveryError) as err:
        sender.send(delivery)
    assert not err.value.retryable and "SWITCHBOARD_TWILIO_ACCOUNT_SID" in err.value.reason
    assert recorder.requests == []


# -- the key commands and make run's development key ------------------------------------------------------


def test_keys_cli_issue_list_revoke(dsn, tmp_path, monkeypatch, services):
    from typer.testing import CliRunner

    from router.cli import app as cli_app

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path))
    runner = CliRunner()

    def cli(*args, code=0):
        result = runner.invoke(cli_app, list(args))
        assert result.exit_code == code, result.output
        return json.loads(result.stdout.strip().splitlines()[-1]) if "--json" in args else result.stdout

    assert "--channel" in cli("keys", "issue", "--help")
    issued = cli("keys", "issue", "site", "--channel", "web", "--channel", "app", "--json")
    assert issued["key"].startswith("sbk_") and issued["channels"] == ["app", "web"]
    assert "without that channel's webhook signature" in cli("keys", "issue", "wa", "--channel", "whatsapp")
    assert "unknown channel" in cli("keys", "issue", "bad", "--channel", "fax", "--json", code=1)["error"]
    assert "exists" in cli("keys", "issue", "site", "--channel", "web", "--json", code=1)["error"]
    listed = cli("keys", "list", "--json")["keys"]
    assert [k["name"] for k in listed] == ["site", "wa"] and all("key" not in k for k in listed)
    assert issued["key"] not in json.dumps(listed)
    with TestClient(create_app(services=services)) as client:
        assert client.post("/v1/messages", json=body(), headers=bearer(issued["key"])).status_code == 200
        assert cli("keys", "revoke", "site", "--json")["revoked_at"]
        assert client.post("/v1/messages", json=body(), headers=bearer(issued["key"])).status_code == 401
    assert [k["name"] for k in cli("keys", "list", "--json")["keys"]] == ["wa"]
    assert cli("keys", "revoke", "nobody", "--json", code=1)["error"]


def test_development_key_is_made_once_and_refused_beyond_loopback(services, tmp_path, capsys):
    from router.app.factory import announce_dev_key

    services.settings = services.settings.model_copy(update={"dev_key": True, "home": tmp_path})
    announce_dev_key(services)
    key = (tmp_path / "dev-integration-key").read_text().strip()
    assert key in capsys.readouterr().out
    announce_dev_key(services)                            # the second start prints nothing new
    assert key not in capsys.readouterr().out
    assert (tmp_path / "dev-integration-key").read_text().strip() == key
    with services.pool.connection() as conn:                # a fresh database: the same key registered again
        conn.execute("DELETE FROM integration_keys")
    announce_dev_key(services)
    with TestClient(create_app(services=services)) as client:
        assert client.post("/v1/messages", json=body(), headers=bearer(key)).status_code == 200
    services.settings = services.settings.model_copy(update={"host": "0.0.0.0"})
    with pytest.raises(RuntimeError, match="loopback"):
        announce_dev_key(services)


def test_the_channel_registry_covers_every_adapter():
    from router.app.keys import CHANNELS, DIRECT_CHANNELS, SIGNED_CHANNELS
    from router.channels.registry import ADAPTERS, _adapter_classes

    assert set(ADAPTERS) <= set(CHANNELS) and DIRECT_CHANNELS == ("app",)
    assert set(SIGNED_CHANNELS) == set(ADAPTERS) - {"web"}
    assert tuple(_adapter_classes()) == ADAPTERS


def test_the_apis_channel_enum_is_the_registrys(bare):
    """The channel names are listed once (router.channels.registry): the schema's enum and what the API
    accepts follow it, the direct-only channel included."""
    from router.channels.registry import CHANNELS

    client, services = bare
    spec = client.app.openapi()          # /openapi.json itself needs an admin key (test_exposure)
    assert spec["components"]["schemas"]["MessageIn"]["properties"]["channel"]["enum"] == list(CHANNELS)
    key = issue_integration_key(services.pool, list(CHANNELS))
    for n, channel in enumerate(CHANNELS):
        r = client.post("/v1/messages", json=body(channel=channel, message_id=f"enum-{n}"), headers=bearer(key))
        assert r.status_code == 200, (channel, r.text)
