"""WeChat Official Account in compatible / safe mode: msg_signature, AES-256-CBC with 32-byte PKCS#7
blocks, the AppID check, encrypted passive replies, and the handshake that stays plaintext.

The ciphertexts here come from WeChat's own sample (WXBizMsgCrypt: token ``spamtest``, the
EncodingAESKey ``abc...ABCDEFG``, AppID ``wx2c2769f8efd9abc2``) or from the small encoder below,
written from the documented scheme and sharing no code with the gateway.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time

import defusedxml.ElementTree as ET
import pytest
from channels_support import RecordingServer, channel_app, channel_settings, count, reply_decider, stored
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from pydantic import SecretStr

URL = "/v1/channels/wechat/webhook"
TOKEN = "spamtest"
AES_KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
APP_ID = "wx2c2769f8efd9abc2"

# WeChat's sample message in compatible mode (plaintext and <Encrypt> side by side), with its query.
SAMPLE_ENCRYPT = (
    "hyzAe4OzmOMbd6TvGdIOO6uBmdJoD0Fk53REIHvxYtJlE2B655HuD0m8KUePWB3+LrPXo87wzQ1QLvbeUgmBM4x6F8PGHQHFVAFmOD2LdJF9"
    "FrXpbUAh0B5GIItb52sn896wVsMSHGuPE328HnRGBcrS7C41IzDWyWNlZkyyXwon8T332jisa+h6tEDYsVticbSnyU8dKOIbgU6ux5VTjg3y"
    "t+WGzjlpKn6NPhRjpA912xMezR4kw6KWwMrCVKSVCZciVGCgavjIQ6X8tCOp3yZbGpy0VxpAe+77TszTfRd5RJSVO/HTnifJpXgCSUdUue1v"
    "6h0EIBYYI1BD1DlD+C0CR8e6OewpusjZ4uBl9FyJvnhvQl+q5rv1ixrcpCumEPo5MJSgM9ehVsNPfUM669WuMyVWQLCzpu9GhglF2PE="
)
SAMPLE_XML = (
    "<xml><ToUserName><![CDATA[gh_10f6c3c3ac5a]]></ToUserName><FromUserName><![CDATA[oyORnuP8q7ou2gfYjqLzSIWZf0rs]]>"
    "</FromUserName><CreateTime>1409735668</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[abcdteT]]>"
    f"</Content><MsgId>6054768590064713728</MsgId><Encrypt><![CDATA[{SAMPLE_ENCRYPT}]]></Encrypt></xml>"
)
SAMPLE_QUERY = {"signature": "16120ec1b8dbb870f510d87ce6bc2463eae6ca1a", "timestamp": "1409735669",
                "nonce": "1320562132", "encrypt_type": "aes", "msg_signature": "5d197aaffba7e9b25a30732f161a50dee96bd5fa",
                "openid": "oyORnuP8q7ou2gfYjqLzSIWZf0rs"}


# -- an independent encoder / decoder of the documented scheme -------------------------------------

def _key() -> bytes:
    return base64.b64decode(AES_KEY + "=")


def sha1_sorted(*parts: str) -> str:
    return hashlib.sha1("".join(sorted(parts)).encode()).hexdigest()


def wx_encrypt(xml: str, app_id: str = APP_ID, pad: int | None = None) -> str:
    plain = os.urandom(16) + len(xml.encode()).to_bytes(4, "big") + xml.encode() + app_id.encode()
    n = 32 - len(plain) % 32
    plain += bytes([n if pad is None else pad]) * n      # pad=0: a broken padding byte, for the malformed case
    enc = Cipher(algorithms.AES(_key()), modes.CBC(_key()[:16])).encryptor()
    return base64.b64encode(enc.update(plain) + enc.finalize()).decode()


def wx_decrypt(encrypt: str) -> tuple[str, str]:
    dec = Cipher(algorithms.AES(_key()), modes.CBC(_key()[:16])).decryptor()
    plain = dec.update(base64.b64decode(encrypt)) + dec.finalize()
    plain = plain[:-plain[-1]]
    length = int.from_bytes(plain[16:20], "big")
    return plain[20:20 + length].decode(), plain[20 + length:].decode()


def signed_query(encrypt: str, timestamp: str | None = None, nonce: str = "424242", **extra) -> dict:
    timestamp = timestamp or str(int(time.time()))
    return {"signature": sha1_sorted(TOKEN, timestamp, nonce), "timestamp": timestamp, "nonce": nonce,
            "encrypt_type": "aes", "msg_signature": sha1_sorted(TOKEN, timestamp, nonce, encrypt), **extra}


def safe_mode_body(encrypt: str) -> bytes:
    return f"<xml><ToUserName><![CDATA[gh_10f6c3c3ac5a]]></ToUserName><Encrypt><![CDATA[{encrypt}]]></Encrypt></xml>".encode()


def text_message(content: str, msg_id: str = "7000000000000000001", openid: str = "oCustomer1") -> str:
    return (f"<xml><ToUserName><![CDATA[gh_10f6c3c3ac5a]]></ToUserName><FromUserName><![CDATA[{openid}]]>"
            f"</FromUserName><CreateTime>1700000000</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{content}]]></Content><MsgId>{msg_id}</MsgId></xml>")


def aes_settings(settings, url, **overrides):
    return channel_settings(settings, url, **{"wechat_token": SecretStr(TOKEN), "wechat_app_id": APP_ID,
                                             "wechat_encoding_aes_key": SecretStr(AES_KEY), **overrides})


@pytest.fixture
def recorder():
    server = RecordingServer()
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(aes_settings(settings, recorder.url)) as parts:
        yield parts


def open_reply(response) -> tuple[ET.Element, str]:
    """The encrypted passive reply: its signature checked, its XML and AppID decrypted."""
    outer = ET.fromstring(response.content)
    assert outer.tag == "xml" and [c.tag for c in outer] == ["Encrypt", "MsgSignature", "TimeStamp", "Nonce"]
    encrypt, ts, nonce = outer.findtext("Encrypt"), outer.findtext("TimeStamp"), outer.findtext("Nonce")
    assert outer.findtext("MsgSignature") == sha1_sorted(TOKEN, ts, nonce, encrypt)
    xml, app_id = wx_decrypt(encrypt)
    return ET.fromstring(xml), app_id


@pytest.fixture
def sample_app(settings, recorder):
    """The documentation's sample was signed in 2014: only this app accepts timestamps that old."""
    with channel_app(aes_settings(settings, recorder.url, wechat_timestamp_window_seconds=10**10)) as parts:
        yield parts


def test_wechat_sample_is_decrypted_and_answered_encrypted(sample_app):
    client, services, _ = sample_app
    r = client.post(URL, params=SAMPLE_QUERY, content=SAMPLE_XML.encode(), headers={"Content-Type": "text/xml"})
    assert r.status_code == 200, r.text
    inner, app_id = open_reply(r)
    assert app_id == APP_ID
    assert inner.findtext("ToUserName") == "oyORnuP8q7ou2gfYjqLzSIWZf0rs"
    assert inner.findtext("FromUserName") == "gh_10f6c3c3ac5a"
    assert inner.findtext("MsgType") == "text" and inner.findtext("Content") == "echo: abcdteT"
    with services.pool.connection() as conn:
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        conv = conn.execute("SELECT * FROM conversations").fetchone()
    assert (msg["external_id"], msg["text"]) == ("6054768590064713728", "abcdteT")
    assert msg["sent_at"].timestamp() == 1409735668 and msg["metadata"]["encryption"] == "aes"
    assert conv["external_id"] == "oyORnuP8q7ou2gfYjqLzSIWZf0rs"


def test_safe_mode_message_encrypted_here_is_normalised(app):
    client, services, _ = app
    encrypt = wx_encrypt(text_message("你好，我想退货 <b>&amp;</b>"))
    r = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
    assert r.status_code == 200, r.text
    inner, _ = open_reply(r)
    assert inner.findtext("Content") == "echo: 你好，我想退货 <b>&amp;</b>"
    with services.pool.connection() as conn:
        msg = conn.execute("SELECT external_id, text FROM messages WHERE direction = 'in'").fetchone()
    assert (msg["external_id"], msg["text"]) == ("7000000000000000001", "你好，我想退货 <b>&amp;</b>")
    # WeChat retries with the same ciphertext: processed once, answered again
    r2 = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
    assert r2.status_code == 200 and open_reply(r2)[0].findtext("Content") == inner.findtext("Content")
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1


def test_bad_msg_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    encrypt = wx_encrypt(text_message("hello"))
    good = signed_query(encrypt)
    other = wx_encrypt(text_message("something else"))
    for params, body in (
        ({**good, "msg_signature": "0" * 40}, safe_mode_body(encrypt)),
        (good, safe_mode_body(other)),                                   # signed for another ciphertext
        ({k: v for k, v in good.items() if k != "msg_signature"}, safe_mode_body(encrypt)),
        ({**good, "signature": "f" * 40}, safe_mode_body(encrypt)),      # the plain signature must hold too
        (signed_query(encrypt, timestamp=str(int(time.time()) + 1)) | {"timestamp": str(int(time.time()))},
         safe_mode_body(encrypt)),
    ):
        r = client.post(URL, params=params, content=body)
        assert r.status_code == 401, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
    assert set(stored(services).values()) == {0}


def test_wrong_app_id_is_401_and_nothing_stored(app):
    client, services, _ = app
    encrypt = wx_encrypt(text_message("hello"), app_id="wx0000000000000000")
    r = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
    assert r.status_code == 401 and "AppID" in r.json()["detail"]
    assert set(stored(services).values()) == {0}


@pytest.mark.parametrize("encrypt", [
    "not base64 at all!",
    base64.b64encode(b"sixteen bytes!!!").decode(),            # one AES block, not a 32-byte multiple
    "A" * 63,                                                  # base64 with bad length
], ids=["not-base64", "short-block", "bad-base64-length"])
def test_malformed_ciphertext_is_422(app, encrypt):
    client, services, _ = app
    r = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
    assert r.status_code == 422, r.text
    assert set(stored(services).values()) == {0}


def test_bad_padding_framing_and_shapes_are_422(app):
    client, services, _ = app
    cases = []
    broken = wx_encrypt(text_message("hello"), pad=0)                      # padding byte 0
    cases.append((signed_query(broken), safe_mode_body(broken)))
    # a length field pointing past the end of the plaintext
    dec_key = _key()
    plain = os.urandom(16) + (10_000).to_bytes(4, "big") + b"<xml/>" + APP_ID.encode()
    n = 32 - len(plain) % 32
    enc = Cipher(algorithms.AES(dec_key), modes.CBC(dec_key[:16])).encryptor()
    framed = base64.b64encode(enc.update(plain + bytes([n]) * n) + enc.finalize()).decode()
    cases.append((signed_query(framed), safe_mode_body(framed)))
    cases.append((signed_query(""), b"<xml><ToUserName>x</ToUserName></xml>"))   # no <Encrypt>
    cases.append((signed_query("x"), b"not xml"))
    cases.append(({**signed_query("x"), "encrypt_type": "rot13"}, safe_mode_body("x")))
    inner_not_xml = wx_encrypt("this is not xml")
    cases.append((signed_query(inner_not_xml), safe_mode_body(inner_not_xml)))
    for params, body in cases:
        r = client.post(URL, params=params, content=body)
        assert r.status_code == 422, (params, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert set(stored(services).values()) == {0}


def test_echostr_handshake_stays_plaintext(app):
    client, _, _ = app
    # an Official Account verifies its URL with the plain signature in every mode; echostr is echoed
    q = {"signature": SAMPLE_QUERY["signature"], "timestamp": "1409735669", "nonce": "1320562132", "echostr": "shr5ch"}
    r = client.get(URL, params=q)
    assert r.status_code == 200 and r.text == "shr5ch"
    assert client.get(URL, params={**q, "signature": "0" * 40}).status_code == 403


def test_reply_too_long_for_a_passive_reply_stays_in_the_outbox(settings, recorder):
    long_decider = reply_decider(lambda _: "长" * 900)     # 2,700 bytes: more than one WeChat text holds
    with channel_app(aes_settings(settings, recorder.url), decider=long_decider) as (client, services, _):
        encrypt = wx_encrypt(text_message("hi"))
        r = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
        assert r.status_code == 200 and r.text == "success"
        with services.pool.connection() as conn:
            assert conn.execute("SELECT status FROM outbox").fetchone()["status"] == "pending"


def test_plaintext_refused_when_encryption_required_and_bad_key_disables(settings, recorder):
    plain = text_message("hello").encode()
    now = str(int(time.time()))
    q = {"signature": sha1_sorted(TOKEN, now, "2"), "timestamp": now, "nonce": "2"}
    with channel_app(channel_settings(settings, recorder.url, wechat_token=SecretStr(TOKEN))) as (client, _, _):
        # plaintext mode (no EncodingAESKey): the plain signature is enough
        assert client.post(URL, params=q, content=plain).status_code == 200
    with channel_app(aes_settings(settings, recorder.url)) as (client, services, _):
        # an EncodingAESKey means safe mode: omitting encrypt_type does not downgrade to plaintext
        before = stored(services)
        assert client.post(URL, params=q, content=plain).status_code == 401
        assert stored(services) == before
    with channel_app(aes_settings(settings, recorder.url, wechat_require_encryption=True)) as (client, services, _):
        before = stored(services)
        other = text_message("hello again", msg_id="7000000000000000002").encode()
        assert client.post(URL, params=q, content=other).status_code == 401
        assert stored(services) == before
    with channel_app(channel_settings(settings, recorder.url)) as (client, _, _):      # no EncodingAESKey here
        encrypt = wx_encrypt(text_message("hello", msg_id="7000000000000000003"))
        r = client.post(URL, params=signed_query(encrypt), content=safe_mode_body(encrypt))
        assert r.status_code == 401 and "ENCODING_AES_KEY" in r.json()["detail"]
    with channel_app(aes_settings(settings, recorder.url, wechat_encoding_aes_key=SecretStr("short"))) as (client, _, _):
        r = client.post(URL, params=q, content=plain)
        assert r.status_code == 404 and "ENCODING_AES_KEY" in r.json()["detail"]
