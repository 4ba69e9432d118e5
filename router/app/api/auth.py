"""Who may call the direct API: an integration key (``Authorization: Bearer sbk_...``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from router.app.keys import IntegrationKey, authenticate_key, feedback_secret
from router.problems import Problem

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="switchboard"'}
_bearer = HTTPBearer(auto_error=False, scheme_name="IntegrationKey",
                     description="An integration key (`switchboard keys issue NAME --channel web`).")


def unauthorized(detail: str) -> Problem:
    return Problem(401, detail, headers=CHALLENGE)


async def optional_key(request: Request,
                       creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> IntegrationKey | None:
    """The presented key when valid; None when none was presented; 401 for a wrong or revoked one, and for an
    Authorization header that is not ``Bearer <key>`` (it is refused, not ignored in favour of another credential)."""
    if creds is None:
        if "authorization" in request.headers:
            raise unauthorized("The Authorization header is not 'Bearer <integration key>'.")
        return None
    pool = request.app.state.services.pool

    # repeated on a fresh connection when the server ends the session under it (a clean restart)
    key = await run_in_threadpool(pool.run, lambda conn: authenticate_key(conn, creds.credentials))
    if key is None:
        raise unauthorized("The integration key is unknown or revoked.")
    return key


async def require_key(key: Annotated[IntegrationKey | None, Depends(optional_key)]) -> IntegrationKey:
    if key is None:
        raise unauthorized("This endpoint needs an integration key: Authorization: Bearer sbk_...")
    return key


KeyDep = Annotated[IntegrationKey, Depends(require_key)]
OptionalKeyDep = Annotated[IntegrationKey | None, Depends(optional_key)]

# the other way to rate a conversation, stated as a security scheme so the schema says the operation takes
# either credential (a wrong token is 401, like a wrong key)
_conversation_token = APIKeyHeader(
    name="X-Conversation-Token", auto_error=False, scheme_name="ConversationToken",
    description="The `feedback_token` of a POST /v1/messages answer (`sbf_` and 40 hex digits); it rates that "
                "answer's conversation and no other.")
ConversationTokenDep = Annotated[str | None, Depends(_conversation_token)]


async def feedback_secret_of(request: Request) -> bytes:
    """The feedback-token secret, read once per process from the database."""
    services = request.app.state.services
    cached = getattr(services, "_feedback_secret", None)
    if cached is None:
        cached = await run_in_threadpool(services.pool.run, feedback_secret)
        services._feedback_secret = cached
    return cached
