"""The real app over real HTTP in a test: uvicorn on 127.0.0.1 (an ephemeral port) in a thread, and a wait for
the turns of a served app to stand outside the database (their calls to a shop running)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def served(app: Any, *, start_timeout: float = 60.0, stop_timeout: float = 10.0, **options: Any) -> Iterator[str]:
    """``app`` served until the block ends (lifespan on, a graceful shutdown of 1 s); yields its base URL.
    ``options`` are more of uvicorn's Config (the gateway's own protocol, say)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    config = {"log_config": None, "lifespan": "on", "timeout_graceful_shutdown": 1, **options}
    server = uvicorn.Server(uvicorn.Config(app, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped while starting"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(stop_timeout)
        sock.close()


def pool_idle(pool: Any, *, quiet_for: float, timeout: float, min_requests: int = 0,
              alive: Callable[[], bool] = lambda: True) -> bool:
    """Whether every connection of ``pool`` came back and stayed back for ``quiet_for`` s within ``timeout`` s
    (after at least ``min_requests`` were handed out, and while ``alive()``): the turns ran their pass and wait
    outside the database."""
    deadline = time.monotonic() + timeout
    idle_since = None
    while time.monotonic() < deadline and alive():
        stats = pool.get_stats()
        if stats.get("requests_num", 0) >= min_requests and stats.get("pool_size", 0) == stats.get("pool_available", 0):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= quiet_for:
                return True
        else:
            idle_since = None
        time.sleep(0.01)
    return False
