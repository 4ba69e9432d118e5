"""Channel secrets, channel API base URLs and outbox delivery settings.

A mixin of :class:`router.app.settings.Settings`, so every field is read from the environment with
the ``SWITCHBOARD_`` prefix (``SWITCHBOARD_WECHAT_TOKEN``, ``SWITCHBOARD_TELEGRAM_API_BASE_URL``...).
Secrets are ``SecretStr`` and never have defaults: a channel whose secret is unset is disabled
(its webhook answers 404) rather than accepting unsigned traffic. API base URLs default to the
public services and are overridable so a test or a staging proxy can stand in for them.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


def secret(value: SecretStr | None) -> str | None:
    """The plain value of an optional secret ('' counts as unset)."""
    if value is None:
        return None
    return value.get_secret_value() or None


def configured(value: SecretStr | None) -> str:
    """The plain value of a secret a code path needs set (a channel is enabled only with it): never None."""
    plain = secret(value)
    if plain is None:
        raise RuntimeError("a channel secret this path needs is not set (the channel should not be enabled)")
    return plain


class ChannelSettings(BaseModel):
    # -- the gateway as the channels see it
    public_url: str | None = Field(
        default=None,
        description="Public base URL of the gateway (e.g. https://cs.example.com). Twilio signs the full URL it "
        "called; behind a proxy the gateway sees another one. Unset: the URL of the request as received.",
    )

    # -- web (the /v1/messages shape on /v1/channels/web/webhook)
    web_hmac_secret: SecretStr | None = Field(
        default=None, description="Shared secret: web webhooks need X-Switchboard-Signature: sha256=<hex>. Unset: "
        "the web webhook answers 404 (web and app traffic goes to /v1/messages with an integration key)."
    )
    web_unsigned: bool = Field(
        default=False, description="Accept unsigned web webhooks when no SWITCHBOARD_WEB_HMAC_SECRET is set: anyone "
        "who reaches the port then speaks for any customer id. Only behind the site's own backend; beyond "
        "loopback the gateway refuses to start with it unless SWITCHBOARD_ALLOW_UNAUTHENTICATED is set."
    )
    web_signature_window_seconds: int = Field(
        default=300, ge=1, description="A signed web request's X-Switchboard-Timestamp may be this far from now."
    )
    web_api_base_url: str | None = Field(
        default=None, description="Where web replies and agent messages are POSTed (signed like inbound). "
        "Unset: web replies are only returned in the HTTP response / transcript."
    )

    # -- WeChat Official Account (plaintext, compatible or safe mode)
    wechat_token: SecretStr | None = Field(default=None, description="Token configured in the WeChat console.")
    wechat_app_id: str | None = Field(
        default=None, description="AppID of the Official Account: for the customer-service API, and checked in "
        "every encrypted message."
    )
    wechat_encoding_aes_key: SecretStr | None = Field(
        default=None, description="EncodingAESKey (43 characters) of the console's compatible/safe mode: "
        "decrypts messages with encrypt_type=aes and encrypts the passive replies to them."
    )
    wechat_require_encryption: bool = Field(
        default=False, description="Refuse plaintext POSTs (401). Implied whenever an EncodingAESKey is set."
    )
    wechat_timestamp_window_seconds: int = Field(
        default=300, ge=1, description="A POST's signed timestamp may be this far from now; a (timestamp, nonce, "
        "signature) seen before is accepted again only with the same body (WeChat's own retry)."
    )
    wechat_app_secret: SecretStr | None = Field(default=None, description="For access tokens of the customer-service API.")
    wechat_api_base_url: str = "https://api.weixin.qq.com"
    wechat_passive_reply_seconds: float = Field(
        default=4.0, description="Answer within this budget as a passive XML reply (WeChat waits 5 s); later "
        "replies go through the customer-service API."
    )
    inbound_retry_seconds: float = Field(
        default=10.0, ge=0, description="A message acknowledged before its turn committed is held in the inbound "
        "queue; the inbound worker routes it again (a replay if the turn did commit) after this many seconds.")
    inbound_poll_seconds: float = Field(default=1.0, gt=0, description="How often the inbound worker looks for "
                                        "held messages that are due.")

    # -- WhatsApp Cloud API
    whatsapp_app_secret: SecretStr | None = Field(default=None, description="Meta app secret (X-Hub-Signature-256).")
    whatsapp_verify_token: SecretStr | None = Field(default=None, description="hub.verify_token of the GET handshake.")
    whatsapp_access_token: SecretStr | None = None
    whatsapp_api_base_url: str = "https://graph.facebook.com/v21.0"

    # -- Telegram Bot API
    telegram_secret_token: SecretStr | None = Field(
        default=None, description="secret_token given to setWebhook (X-Telegram-Bot-Api-Secret-Token)."
    )
    telegram_bot_token: SecretStr | None = None
    telegram_api_base_url: str = "https://api.telegram.org"

    # -- SMS through Twilio
    twilio_auth_token: SecretStr | None = Field(default=None, description="Signs X-Twilio-Signature and the REST API.")
    twilio_account_sid: str | None = Field(
        default=None, pattern=r"^AC[A-Za-z0-9]{1,64}$",
        description="The Twilio account that sends replies (from settings only, never from a webhook).")
    twilio_api_base_url: str = "https://api.twilio.com"

    # -- Chatwoot Agent Bot
    chatwoot_webhook_secret: SecretStr | None = Field(
        default=None, description="Webhook secret: X-Chatwoot-Signature = sha256=HMAC(secret, '{timestamp}.{body}')."
    )
    chatwoot_webhook_token: SecretStr | None = Field(
        default=None, description="For Chatwoot versions that do not sign: a token the bot URL carries as ?token=."
    )
    chatwoot_api_url: str | None = Field(default=None, description="Chatwoot base URL, e.g. https://app.chatwoot.com")
    chatwoot_api_token: SecretStr | None = Field(default=None, description="api_access_token of the agent bot.")
    chatwoot_account_id: int | None = Field(
        default=None, ge=1, description="The Chatwoot account the bot serves: replies go to this account only "
        "(never one named by a webhook), and webhooks of another account are refused."
    )

    # -- outbox delivery
    dispatcher_enabled: bool = Field(default=True, description="Run the outbox dispatcher loop inside the app.")
    outbox_poll_seconds: float = 0.5
    outbox_batch: int = 50
    outbox_concurrency: int = 8
    outbox_max_attempts: int = 8
    outbox_backoff_base_seconds: float = 2.0
    outbox_backoff_max_seconds: float = 900.0
    outbox_lease_seconds: float = 60.0
    outbox_http_timeout_seconds: float = 10.0
    outbox_rate_limits: dict[str, float] = Field(
        default_factory=lambda: {"telegram": 30.0, "whatsapp": 80.0, "sms": 10.0, "wechat": 50.0,
                                 "chatwoot": 20.0, "web": 50.0},
        description="Messages per second per channel (token bucket, burst = one second's worth); JSON in the env.",
    )
