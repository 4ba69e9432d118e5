"""``/v1/channels/{channel}/webhook``: every channel's webhook, and its GET verification handshake.

Order of work for a POST: the body size limit (middleware, 413), the channel (404 when unknown
or not configured), the signature (401, nothing stored), the payload (422), the text limit
(413), then routing. Database trouble answers 503 so the channel retries later; idempotency on
the channel's message id makes those retries safe.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from router.app.api.deps import ServicesDep
from router.app.turn_threads import run_turn
from router.channels.base import Ack, ChannelAdapter, Outcome, WebhookError, WebhookRequest
from router.channels.inbound_queue import hold
from router.channels.registry import ADAPTERS
from router.db.errors import classify
from router.problems import Problem

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/channels", tags=["channels"])

_ERRORS = {
    401: {"description": "Bad or missing signature; nothing was stored"},
    404: {"description": "Unknown channel, or the channel is not configured"},
    409: {"description": "The message id is known but has no turn"},
    413: {"description": "Body or message text too large"},
    422: {"description": "The payload is not the channel's documented shape"},
    503: {"description": "The database is unavailable; the channel should retry"},
}


def gateway(services):
    """The channel gateway, built once per process on first use."""
    if services.channels is None:
        from router.app.channel_gateway import ChannelGateway

        services.channels = ChannelGateway(services.settings, services.pool, services.pipeline, services.metrics)
    return services.channels


def _adapter(services, channel: str) -> ChannelAdapter:
    adapter = gateway(services).adapter(channel)
    if adapter is None:
        raise Problem(404, f"unknown channel {channel!r}; known: {', '.join(ADAPTERS)}", title="Unknown channel")
    ok, why = adapter.enabled()
    if not ok:
        raise Problem(404, f"the {channel} channel is not enabled: {why}", title="Channel not enabled")
    return adapter


async def _raw_request(request: Request) -> WebhookRequest:
    return WebhookRequest(
        method=request.method,
        url=str(request.url),
        headers={k.lower(): v for k, v in request.headers.items()},
        query=dict(request.query_params),
        body=await request.body() if request.method == "POST" else b"",
    )


def _response(ack: Ack) -> Response:
    if isinstance(ack.body, dict | list):
        return JSONResponse(ack.body, status_code=ack.status, headers=ack.headers or None)
    return Response(ack.body, status_code=ack.status, media_type=ack.media_type, headers=ack.headers or None)


def _problem_for(exc: Exception) -> Problem:
    if isinstance(exc, LookupError):
        return Problem(409, "this message id is already stored but has no turn", title="Conflict")
    mapped = classify(exc)
    if mapped is not None:   # answered 503 with Retry-After by the app's handler: the channel retries
        raise mapped from None
    raise exc


@router.get("/{channel}/webhook", summary="A channel's verification handshake (WeChat echostr, WhatsApp hub.challenge)",
            response_class=Response, responses={**_ERRORS, 403: {"description": "Wrong verify token"},
                                                405: {"description": "The channel has no handshake"}})
async def channel_handshake(channel: str, request: Request, services: ServicesDep) -> Response:
    adapter = _adapter(services, channel)
    try:
        return _response(adapter.handshake(await _raw_request(request)))
    except WebhookError as exc:
        raise Problem(exc.status, exc.detail) from None


@router.post(
    "/{channel}/webhook",
    summary="Receive a channel's webhook delivery",
    description="Channels: web (the /v1/messages JSON, X-Switchboard-Signature), wechat (Official Account "
    "XML), whatsapp (Cloud API JSON), telegram (Bot API Update), sms (Twilio form), chatwoot (Agent Bot event). "
    "Idempotent on the channel's message id: a retried delivery is processed once.",
    response_class=Response,
    responses=_ERRORS,
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"type": "object"}},
        "application/xml": {"schema": {"type": "string"}},
        "application/x-www-form-urlencoded": {"schema": {"type": "object"}},
    }}},
)
async def channel_webhook(channel: str, request: Request, services: ServicesDep) -> Response:
    t0 = time.monotonic()
    adapter = _adapter(services, channel)
    raw = await _raw_request(request)
    try:
        adapter.verify(raw)
        parsed = adapter.parse(raw)
    except WebhookError as exc:
        if exc.status == 401:
            log.warning("rejected %s webhook: %s", channel, exc.detail)
        raise Problem(exc.status, exc.detail) from None
    except Exception as exc:  # noqa: BLE001 - parsing touches no state: an unforeseen shape is a malformed body
        log.warning("malformed %s webhook (%s: %s)", channel, type(exc).__name__, exc)
        raise Problem(422, f"the payload is not a valid {channel} webhook ({type(exc).__name__})") from None
    replay = adapter.replay_key(raw)
    if replay is not None:
        try:
            fresh = await run_in_threadpool(remember_nonce, services.pool, adapter.name, replay, raw.body)
        except Exception as exc:  # noqa: BLE001 - mapped to 503, anything else re-raised
            raise _problem_for(exc) from None
        if not fresh:
            log.warning("rejected %s webhook: a signature seen before came with another body", channel)
            raise Problem(401, "this signature was already used for another message (a replay?)")
    limit = services.settings.max_text_chars
    for pm in parsed.messages:
        if len(pm.message.text) > limit:
            raise Problem(413, f"a message text has {len(pm.message.text)} characters; the limit is {limit}",
                          title="Content Too Large")
    gw = gateway(services)
    if parsed.receipts:
        try:
            await run_in_threadpool(_record_receipts, services.pool, adapter.name, parsed)
        except Exception as exc:  # noqa: BLE001 - mapped to 503, anything else re-raised
            raise _problem_for(exc) from None
    if adapter.passive_reply_seconds and len(parsed.messages) == 1:
        return await _with_passive_reply(request, gw, adapter, parsed, t0)
    try:
        # on a turn thread (router.app.turn_threads): a turn waiting on a slow shop takes none of the app's others
        outcomes = await run_turn(request.app.state, services.metrics, gw.process_all, adapter, parsed.messages)
    except Exception as exc:  # noqa: BLE001 - mapped to 409/503, anything else re-raised
        raise _problem_for(exc) from None
    return _response(adapter.acknowledge(outcomes, parsed))


_NONCE = """
WITH expired AS (
    DELETE FROM ingress_nonces
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM ingress_nonces WHERE expires_at < now() LIMIT 20))
), seen AS (
    INSERT INTO ingress_nonces (channel, nonce, body_sha256, expires_at)
    VALUES (%(channel)s, %(nonce)s, %(digest)s, now() + make_interval(secs => %(keep)s))
    ON CONFLICT (channel, nonce) DO UPDATE SET expires_at = ingress_nonces.expires_at
    RETURNING body_sha256
)
SELECT body_sha256 = %(digest)s AS same FROM seen
"""


def remember_nonce(pool, channel: str, replay: tuple[str, int], body: bytes) -> bool:
    """Record a signed request's nonce; False when that nonce was seen with another body (a forged replay).

    The same body again is the channel's own retry: accepted (the message id deduplicates it). Expired
    nonces are swept a few at a time by the inserts themselves.
    """
    import hashlib

    key, keep = replay
    params = {"channel": channel, "nonce": key[:300], "digest": hashlib.sha256(body).hexdigest(), "keep": keep}
    # a repeat after a lost answer finds its own nonce with the same body
    row = pool.run(lambda conn: conn.execute(_NONCE, params).fetchone(), autocommit=True)
    return bool(row and row["same"])


def _record_receipts(pool, channel: str, parsed) -> None:
    """Store the delivery's status receipts (one transaction); unknown message ids are only listed as ignored."""
    from router.outbox.receipts import record_receipts

    with pool.connection() as conn, conn.transaction():
        unknown = record_receipts(conn, channel, parsed.receipts)
    parsed.receipts_recorded = len(parsed.receipts) - len(unknown)
    parsed.ignored.extend(f"status:{r.status}" for r in unknown)


async def _with_passive_reply(request: Request, gw, adapter: ChannelAdapter, parsed, t0: float) -> Response:
    """Answer in the HTTP response when the reply is ready in time; else let the outbox deliver it."""
    # a task of its own: it goes on (on its turn thread) when the response leaves without its reply
    future = asyncio.ensure_future(run_turn(request.app.state, gw.metrics, gw.process, adapter, parsed.messages[0]))
    _RUNNING.add(future)            # kept until done, whether or not this response waits for it
    future.add_done_callback(_RUNNING.discard)
    budget = max(0.0, adapter.passive_reply_seconds - (time.monotonic() - t0))
    try:
        outcome: Outcome = await asyncio.wait_for(asyncio.shield(future), timeout=budget)
    except TimeoutError:
        # "success" means WeChat never sends this message again: hold it durably first (a failed
        # hold is a 503, so the channel retries); the inbound worker finishes it if the turn fails
        try:
            await run_in_threadpool(hold, gw.pool, adapter.name, parsed.messages[0],
                                    retry_after=gw.settings.inbound_retry_seconds)
        except Exception as exc:  # noqa: BLE001 - mapped to 503, anything else re-raised
            future.add_done_callback(_log_late_failure)
            raise _problem_for(exc) from None
        future.add_done_callback(_log_late_failure)
        log.info("%s reply not ready within %.1fs: it will go through the outbox", adapter.name, budget)
        return _response(adapter.acknowledge([], parsed))
    except Exception as exc:  # noqa: BLE001
        raise _problem_for(exc) from None
    if outcome.reply_text and not adapter.passive_reply_fits(outcome.reply_text):
        # too long for one synchronous reply: the dispatcher sends it in parts
        return _response(adapter.acknowledge([outcome], parsed))
    try:
        text = await run_in_threadpool(gw.take_passive_reply, outcome)
    except Exception as exc:  # noqa: BLE001
        raise _problem_for(exc) from None
    if text:
        ack = adapter.build_reply(outcome, text)
        if ack is not None:
            return _response(ack)
    return _response(adapter.acknowledge([outcome], parsed))


_RUNNING: set[asyncio.Future] = set()


def _log_late_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("a late channel turn failed (%s); its message is held in the inbound queue",
                    type(future.exception()).__name__)
