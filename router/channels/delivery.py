"""The sender protocol: one small class per channel that turns an outbox row into an API call.

A sender either returns a :class:`SendResult` or raises :class:`DeliveryError` saying whether a
retry can help (network trouble, 5xx, 429) or not (4xx: bad recipient, blocked bot, expired
window). Retries, backoff, rate limits and dead letters are the dispatcher's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx

from router.channels.split import TextLimit, split_text
from text import personal

RETRYABLE_STATUS = {408, 425, 429}


@dataclass
class Delivery:
    """One claimed outbox row with what a sender needs to address it."""

    outbox_id: int
    channel: str
    kind: str                      # reply | ack | status | agent_message (texts) | conversation_status
    payload: dict[str, Any]
    address: dict[str, Any]        # channel_routes.address merged with payload["to"]
    attempt: int
    conversation_external_id: str | None = None
    customer_id: str | None = None
    #: parts of a long text delivered by earlier attempts: part number -> the channel's message id
    parts_sent: dict[int, str | None] = field(default_factory=dict)
    #: records one delivered part at once (outbox_id, part, parts, provider id), before the next is sent
    on_part: Callable[[int, int, int, str | None], None] | None = None

    @property
    def text(self) -> str:
        text = self.payload.get("text")
        return text if isinstance(text, str) else ""


@dataclass
class SendResult:
    provider_message_id: str | None = None
    http_status: int | None = None
    skipped: bool = False          # nothing to send on this channel (e.g. web without a callback URL)
    note: str | None = None


@dataclass
class DeliveryError(Exception):
    reason: str
    retryable: bool = True
    http_status: int | None = None
    retry_after: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.reason


class Sender(Protocol):
    channel: str

    def configured(self) -> tuple[bool, str]:
        """Whether the sender has its credentials; the setting to fill when not."""

    def send(self, delivery: Delivery) -> SendResult:
        """Deliver one message (or channel action); raise DeliveryError on failure."""


def send_in_parts(delivery: Delivery, limit: TextLimit, send_one: Callable[[str], SendResult]) -> SendResult:
    """Send the delivery's text in as many ordered calls as the channel's limit needs.

    Each delivered part is recorded (``delivery.on_part``) before the next is sent, and parts that
    an earlier attempt delivered are skipped, so a failure on part k retries from part k. The
    result carries the first part's message id; every part's id is in ``outbox_parts``.
    """
    parts = split_text(delivery.text, limit)
    if len(parts) == 1:
        return send_one(parts[0])
    first = delivery.parts_sent.get(0)
    resumed = sum(1 for i in range(len(parts)) if i in delivery.parts_sent)
    last: SendResult | None = None
    for i, part in enumerate(parts):
        if i in delivery.parts_sent:
            continue
        try:
            last = send_one(part)
        except DeliveryError as exc:
            exc.reason = f"part {i + 1}/{len(parts)}: {exc.reason}"
            raise
        if delivery.on_part is not None:
            delivery.on_part(delivery.outbox_id, i, len(parts), last.provider_message_id)
        delivery.parts_sent[i] = last.provider_message_id
        if i == 0:
            first = last.provider_message_id
    note = f"{len(parts)} parts" + (f", {resumed} of them delivered by earlier attempts" if resumed else "")
    return SendResult(provider_message_id=first, http_status=last.http_status if last else None, note=note)


def retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import time

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def check_response(response: httpx.Response, what: str) -> None:
    """Raise DeliveryError for a non-2xx answer, retryable for 408/425/429/5xx."""
    if 200 <= response.status_code < 300:
        return
    # mask first, then cut: a value straddling the cut would otherwise leave digits no detector recognises
    body = personal.mask_clip(response.text.replace("\n", " "), 300)
    retryable = response.status_code in RETRYABLE_STATUS or response.status_code >= 500
    raise DeliveryError(f"{what}: HTTP {response.status_code}: {body}", retryable=retryable,
                        http_status=response.status_code, retry_after=retry_after_seconds(response))


def post(client: httpx.Client, url: str, what: str, **kwargs) -> httpx.Response:
    """POST and classify: transport errors are retryable, HTTP errors by status."""
    try:
        response = client.post(url, **kwargs)
    except httpx.TransportError as exc:
        raise DeliveryError(f"{what}: {type(exc).__name__}: {exc}", retryable=True) from None
    check_response(response, what)
    return response


def json_of(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def need(address: dict[str, Any], *keys: str) -> list[Any]:
    """Address fields a sender needs; a missing one is a permanent failure (nowhere to send)."""
    missing = [k for k in keys if address.get(k) in (None, "")]
    if missing:
        raise DeliveryError(f"no {', '.join(missing)} in the conversation's address", retryable=False)
    return [address[k] for k in keys]
