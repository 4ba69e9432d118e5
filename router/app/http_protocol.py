"""uvicorn's h11 protocol with a deadline for a request's head.

uvicorn arms its keep-alive timer (``timeout_keep_alive``) only once a response is complete and cancels it at
the first byte of the next request; a new connection gets no timer at all. A client that connects and sends
its request line and headers slowly (or never) would hold the socket forever; h11 bounds their size (16 KiB),
nothing bounds their time. Here the head must be complete within ``SWITCHBOARD_READ_TIMEOUT_SECONDS`` of the
connection, or of the previous response on a kept-alive one; otherwise the connection is closed. The body is
bounded by the body-limit middleware (router/app/middleware.py: 408 when it is not in within the same time).
"""

from __future__ import annotations

import asyncio
import logging
import os

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


def read_timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("SWITCHBOARD_READ_TIMEOUT_SECONDS") or 15.0))
    except ValueError:
        return 15.0


class DeadlineH11Protocol(H11Protocol):
    _head_timer: asyncio.TimerHandle | None = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(read_timeout(), self._head_expired)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and self.transport is not None and not self.transport.is_closing():
            log.info("closing a connection whose request head did not arrive in time",
                     extra={"fields": {"client": str(self.client)}})
            self.transport.close()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._waiting_for_head():
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport is not None and not self.transport.is_closing():
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)
