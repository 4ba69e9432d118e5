"""Channel adapters: every channel's webhook flattened into one internal message.

``ADAPTERS`` names the channels; ``build_adapters(settings)`` makes one adapter of each. Adding a
channel is one file with a class following :class:`router.ingress.base.ChannelAdapter` and one
line here.
"""

from __future__ import annotations

from router.ingress.base import ChannelAdapter


def _adapter_classes() -> dict[str, type]:
    from router.ingress.chatwoot import ChatwootAdapter
    from router.ingress.sms import SmsAdapter
    from router.ingress.telegram import TelegramAdapter
    from router.ingress.web import WebAdapter
    from router.ingress.wechat import WeChatAdapter
    from router.ingress.whatsapp import WhatsAppAdapter

    return {cls.name: cls for cls in (WebAdapter, WeChatAdapter, WhatsAppAdapter, TelegramAdapter, SmsAdapter,
                                      ChatwootAdapter)}


ADAPTERS = ("web", "wechat", "whatsapp", "telegram", "sms", "chatwoot")


def build_adapters(settings) -> dict[str, ChannelAdapter]:
    return {name: cls(settings) for name, cls in _adapter_classes().items()}
