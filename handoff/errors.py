"""Errors of the queue, each carrying the HTTP status the API answers with."""

from __future__ import annotations

from typing import Any


class HandoffError(Exception):
    status = 400
    title = "Bad Request"

    def __init__(self, detail: str, **extra: Any):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class Unauthorized(HandoffError):
    status = 401
    title = "Unauthorized"


class Forbidden(HandoffError):
    status = 403
    title = "Forbidden"


class NotFound(HandoffError):
    status = 404
    title = "Not Found"


class Conflict(HandoffError):
    """The ticket is not in a state that allows the action (claimed by someone else, already resolved...)."""

    status = 409
    title = "Conflict"


class TooLarge(HandoffError):
    status = 413
    title = "Content Too Large"


class Invalid(HandoffError):
    status = 422
    title = "Unprocessable Content"


class TooManyRequests(HandoffError):
    status = 429
    title = "Too Many Requests"


class Unavailable(HandoffError):
    status = 503
    title = "Service Unavailable"
