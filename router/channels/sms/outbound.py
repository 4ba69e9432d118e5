"""SMS through Twilio's Messages API: form POST with HTTP basic auth (account SID, auth token).

Twilio refuses a ``Body`` over 1600 characters (it splits shorter ones into segments itself);
a longer reply goes out as ordered messages, counted in UTF-16 code units to be safe with emoji.
"""

from __future__ import annotations

import httpx

from router.channels.delivery import Delivery, DeliveryError, SendResult, json_of, need, post, send_in_parts
from router.channels.split import TextLimit
from router.channels.settings import secret


class SmsSender:
    channel = "sms"
    text_limit = TextLimit(1600, "utf16")

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client

    def configured(self) -> tuple[bool, str]:
        if secret(self.settings.twilio_auth_token) is None:
            return False, "set SWITCHBOARD_TWILIO_AUTH_TOKEN (and SWITCHBOARD_TWILIO_ACCOUNT_SID)"
        return True, "ok"

    def send(self, delivery: Delivery) -> SendResult:
        to, sender = need(delivery.address, "to", "from")
        sid = self.settings.twilio_account_sid or delivery.address.get("account_sid")
        if not sid:
            raise DeliveryError("no Twilio account SID: set SWITCHBOARD_TWILIO_ACCOUNT_SID", retryable=False)
        url = f"{self.settings.twilio_api_base_url.rstrip('/')}/2010-04-01/Accounts/{sid}/Messages.json"
        auth = (sid, secret(self.settings.twilio_auth_token))

        def send_one(text: str) -> SendResult:
            response = post(self.client, url, "twilio messages", data={"To": to, "From": sender, "Body": text},
                            auth=auth)
            return SendResult(provider_message_id=json_of(response).get("sid"), http_status=response.status_code)

        return send_in_parts(delivery, self.text_limit, send_one)
