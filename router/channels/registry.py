"""The channels: every channel's webhook flattened into one internal message, and one sender each.

``CHANNELS`` names every channel (``ADAPTERS``, those with a webhook, and ``DIRECT``, the direct-API ones); ``build_adapters(settings)`` makes one inbound adapter of each and
``build_senders(settings, client)`` one outbound sender of each. Adding a channel is one folder
``router/channels/<name>/`` (``inbound.py`` following :class:`router.channels.base.ChannelAdapter`,
``outbound.py`` following :class:`router.channels.delivery.Sender`) and one line in each function here.
"""

from __future__ import annotations

from typing import cast

import httpx

from router.channels.base import BaseAdapter, ChannelAdapter
from router.channels.delivery import Sender
from router.channels.settings import ChannelSettings


def _adapter_classes() -> dict[str, type[BaseAdapter]]:
    from router.channels.chatwoot.inbound import ChatwootAdapter
    from router.channels.sms.inbound import SmsAdapter
    from router.channels.telegram.inbound import TelegramAdapter
    from router.channels.web.inbound import WebAdapter
    from router.channels.wechat.inbound import WeChatAdapter
    from router.channels.whatsapp.inbound import WhatsAppAdapter

    return {cls.name: cls for cls in (WebAdapter, WeChatAdapter, WhatsAppAdapter, TelegramAdapter, SmsAdapter,
                                      ChatwootAdapter)}


#: the channels with a webhook adapter and a sender (router/channels/<name>/)
ADAPTERS = ("web", "wechat", "whatsapp", "telegram", "sms", "chatwoot")
#: the channels posted only through the direct API, ``POST /v1/messages`` (a mobile app): no webhook
DIRECT = ("app",)
#: every channel the gateway knows, the one list: the API's enum, integration keys, metrics and reports read it
CHANNELS = ADAPTERS + DIRECT


def handshake_channels() -> tuple[str, ...]:
    """The channels that answer a GET verification handshake (the others answer 405)."""
    return tuple(n for n, cls in _adapter_classes().items() if cls.handshake is not BaseAdapter.handshake)


def build_adapters(settings: ChannelSettings) -> dict[str, ChannelAdapter]:
    # each adapter class completes BaseAdapter to the ChannelAdapter protocol (its own parse)
    return {name: cast(ChannelAdapter, cls(settings)) for name, cls in _adapter_classes().items()}


def build_senders(settings: ChannelSettings, client: httpx.Client) -> dict[str, Sender]:
    from router.channels.chatwoot.outbound import ChatwootSender
    from router.channels.sms.outbound import SmsSender
    from router.channels.telegram.outbound import TelegramSender
    from router.channels.web.outbound import WebSender
    from router.channels.wechat.outbound import WeChatSender
    from router.channels.whatsapp.outbound import WhatsAppSender

    senders = (WebSender, WeChatSender, WhatsAppSender, TelegramSender, SmsSender, ChatwootSender)
    return {cls.channel: cls(settings, client) for cls in senders}


def channel_label(channel: str | None) -> str:
    """A channel as a metrics label: one of the gateway's channels, else "other" (labels never carry
    what a client sent: a phone number as a channel name must not become a time series)."""
    return channel if channel in ADAPTERS else "other"
