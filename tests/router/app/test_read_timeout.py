"""Slow clients do not keep sockets: a request head that does not arrive in time closes the connection, a body
that does not arrive in time is 408. The real app served by uvicorn with the gateway's protocol, raw sockets."""

from __future__ import annotations

import socket
import time

import pytest
import serving_testkit

from router.app.factory import create_app
from router.cli.serve import http_options


@pytest.fixture
def served(services, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_READ_TIMEOUT_SECONDS", "1")
    services.settings = services.settings.model_copy(update={"read_timeout_seconds": 1.0})
    with serving_testkit.served(create_app(services=services), start_timeout=20, **http_options()) as base:
        yield int(base.rsplit(":", 1)[1])


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the socket within ``seconds``, and what it sent before."""
    sock.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except TimeoutError:
        return False, got


def test_a_connection_that_never_sends_its_head_is_closed(served):
    with socket.create_connection(("127.0.0.1", served)) as sock:
        t0 = time.monotonic()
        closed, _ = _closed_within(sock, 5)
        assert closed and time.monotonic() - t0 < 3


def test_a_trickled_head_is_cut_off_and_a_prompt_request_is_served(served):
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        for _ in range(6):              # one header every 0.4 s: never completes within 1 s
            time.sleep(0.4)
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        closed, got = _closed_within(sock, 5)
        assert closed and b"200" not in got and time.monotonic() - t0 < 5
    with socket.create_connection(("127.0.0.1", served)) as sock:   # a kept-alive connection: served twice
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(5)
            assert b"200 OK" in sock.recv(4096)
        closed, _ = _closed_within(sock, 8)       # then idle: closed by the deadline / keep-alive timer
        assert closed


def test_a_body_that_does_not_arrive_in_time_is_408(served):
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200\r\n\r\n{\"channel\":")
        t0 = time.monotonic()
        closed, got = _closed_within(sock, 5)
    assert got.startswith(b"HTTP/1.1 408") and b"application/problem+json" in got
    assert time.monotonic() - t0 < 4
