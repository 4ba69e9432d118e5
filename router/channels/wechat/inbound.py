"""WeChat Official Account (公众号) messages: plaintext, compatible and safe modes.

WeChat signs every request (GET handshake and POST messages) with
``signature = sha1(''.join(sorted([token, timestamp, nonce])))`` in the query string. A POST carries
one XML message; WeChat waits 5 s for the answer and retries up to three times, so the webhook
answers with a passive XML reply when the turn's reply is ready within
``SWITCHBOARD_WECHAT_PASSIVE_REPLY_SECONDS``, else with ``success`` and the dispatcher sends the
reply through the customer-service API. Retries carry the same ``MsgId`` (events: sender + time).

In compatible and safe mode (``encrypt_type=aes`` in the query) the message is in ``<Encrypt>``,
signed by ``msg_signature`` over token, timestamp, nonce and the ciphertext; it is decrypted with
``SWITCHBOARD_WECHAT_ENCODING_AES_KEY`` and must name ``SWITCHBOARD_WECHAT_APP_ID``, and the
passive reply is encrypted the same way (:mod:`router.channels.wechat.crypto`). The GET handshake
of an Official Account stays plaintext in every mode: ``echostr`` is echoed as received.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import defusedxml.ElementTree as SafeET

from router.channels.split import TextLimit
from router.channels.base import (
    Ack,
    BaseAdapter,
    HandshakeError,
    MalformedPayload,
    Outcome,
    Parsed,
    ParsedMessage,
    Route,
    SignatureError,
    WebhookRequest,
    from_unix,
    same,
)
from router.channels.settings import configured, secret
from router.channels.wechat.crypto import CryptoFormatError, WeChatCrypto, WrongAppId, msg_signature
from router.schemas import InboundMessage

MEDIA_TYPES = {"image", "voice", "video", "shortvideo", "location", "link", "file"}
#: text messages (passive replies and the customer-service API) hold 2048 bytes; keep some headroom
TEXT_LIMIT = TextLimit(2000, "utf8")


def signature(token: str, timestamp: str, nonce: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce])).encode()).hexdigest()


def cdata(text: str) -> str:
    # "]]>" cannot appear inside one CDATA section: split it across two
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


class WeChatAdapter(BaseAdapter):
    name = "wechat"

    def __init__(self, settings):
        super().__init__(settings)
        self.passive_reply_seconds = settings.wechat_passive_reply_seconds
        self.crypto: WeChatCrypto | None = None
        self._crypto_problem: str | None = None
        aes = secret(settings.wechat_encoding_aes_key)
        if aes is not None:
            if not settings.wechat_app_id:
                self._crypto_problem = "SWITCHBOARD_WECHAT_ENCODING_AES_KEY needs SWITCHBOARD_WECHAT_APP_ID"
            else:
                try:
                    self.crypto = WeChatCrypto(secret(settings.wechat_token) or "", aes, settings.wechat_app_id)
                except ValueError as exc:
                    self._crypto_problem = f"SWITCHBOARD_WECHAT_ENCODING_AES_KEY: {exc}"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.wechat_token) is None:
            return False, "set SWITCHBOARD_WECHAT_TOKEN to enable the wechat channel"
        if self._crypto_problem:
            return False, self._crypto_problem
        return True, "ok"

    @staticmethod
    def _encrypted(request: WebhookRequest) -> bool:
        mode = request.query.get("encrypt_type") or "raw"
        if mode not in ("raw", "aes"):
            raise MalformedPayload(f"unknown encrypt_type {mode[:20]!r}")
        return mode == "aes"

    @staticmethod
    def _root(body: bytes):
        try:
            root = SafeET.fromstring(body)
        except Exception as exc:  # noqa: BLE001 - ParseError, DTDForbidden, EntitiesForbidden...
            raise MalformedPayload(f"the body is not a WeChat XML message: {type(exc).__name__}") from None
        if root.tag != "xml":
            raise MalformedPayload("the root element must be <xml>")
        return root

    def _ciphertext(self, request: WebhookRequest) -> str:
        encrypt = (self._root(request.body).findtext("Encrypt") or "").strip()
        if not encrypt:
            raise MalformedPayload("encrypt_type=aes but no <Encrypt> element")
        return encrypt

    def _check(self, request: WebhookRequest) -> None:
        q = request.query
        sig, ts, nonce = q.get("signature"), q.get("timestamp"), q.get("nonce")
        if not (sig and ts and nonce):
            raise SignatureError("missing signature, timestamp or nonce query parameters")
        if not same(sig, signature(configured(self.settings.wechat_token), ts, nonce)):
            raise SignatureError("bad signature")

    def _fresh(self, request: WebhookRequest) -> None:
        """The signed timestamp is within the window: a leaked signature stops working minutes later."""
        ts = request.query.get("timestamp") or ""
        if not ts.isdigit() or len(ts) > 12:
            raise SignatureError("missing or bad timestamp query parameter")
        if abs(time.time() - int(ts)) > self.settings.wechat_timestamp_window_seconds:
            raise SignatureError("the timestamp is outside the accepted window (a replay?)")

    def verify(self, request: WebhookRequest) -> None:
        self._fresh(request)
        if not self._encrypted(request):
            # with an EncodingAESKey the console is in safe (or compatible) mode and WeChat always sends
            # encrypt_type=aes: a plaintext POST is a downgrade attempt (its signature covers no body)
            if self.settings.wechat_require_encryption or self.crypto is not None or self._crypto_problem:
                raise SignatureError("plaintext message refused: an EncodingAESKey is configured (safe mode)")
            self._check(request)
            return
        if self.crypto is None:
            raise SignatureError("encrypted message, but SWITCHBOARD_WECHAT_ENCODING_AES_KEY is not set")
        q = request.query
        sig, ts, nonce = q.get("msg_signature"), q.get("timestamp"), q.get("nonce")
        if not (sig and ts and nonce):
            raise SignatureError("missing msg_signature, timestamp or nonce query parameters")
        if not same(sig, msg_signature(configured(self.settings.wechat_token), ts, nonce, self._ciphertext(request))):
            raise SignatureError("bad msg_signature")
        if q.get("signature"):      # WeChat sends the plain signature too: it must hold as well
            self._check(request)

    def replay_key(self, request: WebhookRequest) -> tuple[str, int] | None:
        """(nonce key, seconds to keep it): a signed (timestamp, nonce, signature) comes back only with the
        same body. The plaintext signature covers no body; this stops a leaked one from carrying another."""
        q = request.query
        sig = q.get("msg_signature") or q.get("signature") or ""
        return f"{q.get('timestamp')}:{q.get('nonce')}:{sig}", 2 * self.settings.wechat_timestamp_window_seconds

    def handshake(self, request: WebhookRequest) -> Ack:
        try:
            self._check(request)
        except SignatureError as exc:
            raise HandshakeError(exc.detail) from None
        echostr = request.query.get("echostr")
        if not echostr:
            raise HandshakeError("missing echostr")
        return Ack(echostr, media_type="text/plain")

    def parse(self, request: WebhookRequest) -> Parsed:
        encrypted = self._encrypted(request)
        body = request.body
        if encrypted:
            if self.crypto is None:
                raise SignatureError("encrypted message, but SWITCHBOARD_WECHAT_ENCODING_AES_KEY is not set")
            try:
                body = self.crypto.decrypt(self._ciphertext(request))
            except CryptoFormatError as exc:
                raise MalformedPayload(f"cannot decrypt <Encrypt>: {exc}") from None
            except WrongAppId as exc:
                raise SignatureError(str(exc)) from None
        root = self._root(body)
        f: dict[str, str] = {child.tag: (child.text or "").strip() for child in root}
        for required in ("ToUserName", "FromUserName", "CreateTime", "MsgType"):
            if not f.get(required):
                raise MalformedPayload(f"missing element: {required}")
        if any(len(f.get(k, "")) > 512 for k in ("ToUserName", "FromUserName", "MsgType", "MsgId", "CreateTime")):
            raise MalformedPayload("an id element is too long")
        openid, account, kind = f["FromUserName"], f["ToUserName"], f["MsgType"]
        if kind == "event":
            return Parsed(ignored=[f"event:{f.get('Event') or 'unknown'}"])
        if kind != "text" and kind not in MEDIA_TYPES:
            return Parsed(ignored=[f"msgtype:{kind}"])
        msg_id = f.get("MsgId") or f"{openid}:{f['CreateTime']}"
        text, attachments = self._content(kind, f)
        metadata: dict[str, Any] = {"kind": "text" if kind == "text" else kind, "account": account}
        if encrypted:
            metadata["encryption"] = "aes"      # the passive reply must be encrypted too
        if attachments:
            metadata["attachments"] = attachments
        msg = InboundMessage(
            channel=self.name, conversation_external_id=openid, customer_id=openid,
            message_external_id=msg_id, text=text, sent_at=from_unix(f["CreateTime"]),
            metadata=metadata, attachments=attachments,
        )
        route = Route(channel_user_id=openid, address={"openid": openid, "account": account})
        return Parsed(messages=[ParsedMessage(msg, route)])

    @staticmethod
    def _content(kind: str, f: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
        if kind == "text":
            return f.get("Content", ""), []
        if kind == "voice":  # with speech recognition on, WeChat sends the transcript
            return f.get("Recognition", ""), [{"type": "voice", "media_id": f.get("MediaId"), "format": f.get("Format")}]
        if kind == "image":
            return "", [{"type": "image", "media_id": f.get("MediaId"), "url": f.get("PicUrl")}]
        if kind in ("video", "shortvideo"):
            return "", [{"type": kind, "media_id": f.get("MediaId"), "thumb_media_id": f.get("ThumbMediaId")}]
        if kind == "location":
            return f.get("Label", ""), [{"type": "location", "lat": f.get("Location_X"), "lon": f.get("Location_Y"),
                                         "scale": f.get("Scale"), "label": f.get("Label")}]
        if kind == "link":
            return f.get("Title", ""), [{"type": "link", "title": f.get("Title"), "description": f.get("Description"),
                                         "url": f.get("Url")}]
        return "", [{"type": kind, **{k: v for k, v in f.items() if k not in ("ToUserName", "FromUserName")}}]

    def acknowledge(self, outcomes: list[Outcome], parsed: Parsed) -> Ack:
        # "success": WeChat shows nothing and does not retry; the reply comes via the customer-service API
        return Ack("success", media_type="text/plain")

    def build_reply(self, outcome: Outcome, text: str) -> Ack | None:
        msg = outcome.message
        xml = (
            "<xml>"
            f"<ToUserName>{cdata(msg.conversation_external_id)}</ToUserName>"
            f"<FromUserName>{cdata(str(msg.metadata.get('account', '')))}</FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime>"
            f"<MsgType>{cdata('text')}</MsgType>"
            f"<Content>{cdata(text)}</Content>"
            "</xml>"
        )
        if msg.metadata.get("encryption") == "aes" and self.crypto is not None:
            xml = self.crypto.seal(xml, str(int(time.time())), str(secrets.randbelow(10**10)))
        return Ack(xml, media_type="application/xml")

    def passive_reply_fits(self, text: str) -> bool:
        return TEXT_LIMIT.fits(text)
