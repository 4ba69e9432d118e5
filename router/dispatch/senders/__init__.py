"""One sender per channel; ``build_senders(settings, client)`` makes them all."""

from __future__ import annotations

import httpx

from router.dispatch.base import Sender


def build_senders(settings, client: httpx.Client) -> dict[str, Sender]:
    from router.dispatch.senders.chatwoot import ChatwootSender
    from router.dispatch.senders.sms import SmsSender
    from router.dispatch.senders.telegram import TelegramSender
    from router.dispatch.senders.web import WebSender
    from router.dispatch.senders.wechat import WeChatSender
    from router.dispatch.senders.whatsapp import WhatsAppSender

    senders = (WebSender, WeChatSender, WhatsAppSender, TelegramSender, SmsSender, ChatwootSender)
    return {cls.channel: cls(settings, client) for cls in senders}
