"""WeChat customer-service API (客服消息): replies that missed the passive-reply window.

``POST {base}/cgi-bin/message/custom/send?access_token=...``; the access token comes from
``/cgi-bin/token`` (app id + secret) and is cached until shortly before it expires. WeChat answers
HTTP 200 with an ``errcode``: an expired/invalid token is dropped and retried, ``-1`` (busy) is
retried, anything else (e.g. 45015: the 48-hour window has passed) is final. A text message holds
2048 bytes; a longer reply goes out as ordered messages of at most ``TEXT_LIMIT`` (UTF-8 bytes,
with headroom). WeChat allows a few customer-service messages per customer message (5 within 48 h
since 2023): parts beyond the quota fail with its errcode and dead-letter with the part number.
"""

from __future__ import annotations

import json
import threading
import time

import httpx

from router.channels.delivery import Delivery, DeliveryError, SendResult, json_of, need, post, send_in_parts
from router.channels.wechat.inbound import TEXT_LIMIT
from router.channels.settings import secret

TOKEN_ERRORS = {40001, 40014, 42001}


class WeChatSender:
    channel = "wechat"

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def configured(self) -> tuple[bool, str]:
        if not self.settings.wechat_app_id or secret(self.settings.wechat_app_secret) is None:
            return False, "set SWITCHBOARD_WECHAT_APP_ID and SWITCHBOARD_WECHAT_APP_SECRET"
        return True, "ok"

    def _base(self) -> str:
        return self.settings.wechat_api_base_url.rstrip("/")

    def access_token(self) -> str:
        with self._lock:
            if self._token and time.monotonic() < self._expires:
                return self._token
            try:
                response = self.client.get(f"{self._base()}/cgi-bin/token", params={
                    "grant_type": "client_credential", "appid": self.settings.wechat_app_id,
                    "secret": secret(self.settings.wechat_app_secret)})
            except httpx.TransportError as exc:
                raise DeliveryError(f"wechat token: {type(exc).__name__}", retryable=True) from None
            if response.status_code != 200:
                raise DeliveryError(f"wechat token: HTTP {response.status_code}", retryable=response.status_code >= 500,
                                    http_status=response.status_code)
            data = json_of(response)
            if not data.get("access_token"):
                raise DeliveryError(f"wechat token: errcode {data.get('errcode')}: {data.get('errmsg')}",
                                    retryable=data.get("errcode") == -1)
            self._token = str(data["access_token"])
            self._expires = time.monotonic() + max(60, int(data.get("expires_in") or 7200) - 300)
            return self._token

    def send(self, delivery: Delivery) -> SendResult:
        (openid,) = need(delivery.address, "openid")
        return send_in_parts(delivery, TEXT_LIMIT, lambda text: self._send_text(openid, text))

    def _send_text(self, openid: str, text: str) -> SendResult:
        token = self.access_token()
        body = json.dumps({"touser": openid, "msgtype": "text", "text": {"content": text}},
                          ensure_ascii=False).encode()  # WeChat shows \\u escapes literally: send UTF-8
        response = post(self.client, f"{self._base()}/cgi-bin/message/custom/send", "wechat custom/send",
                        params={"access_token": token}, content=body,
                        headers={"Content-Type": "application/json; charset=utf-8"})
        data = json_of(response)
        code = data.get("errcode", 0)
        if code in (0, None):
            return SendResult(provider_message_id=data.get("msgid") and str(data["msgid"]),
                              http_status=response.status_code)
        if code in TOKEN_ERRORS:
            with self._lock:
                self._token = None
        raise DeliveryError(f"wechat custom/send: errcode {code}: {data.get('errmsg')}",
                            retryable=code in TOKEN_ERRORS or code == -1, http_status=response.status_code)
