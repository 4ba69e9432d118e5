"""Helpers of the tool gateway's tests: ports, the variables tools.yaml sees, the shop's dump, and a small real
HTTP API on loopback for the HTTP transport (FastAPI served by uvicorn in a thread)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


def gateway_env(**extra: str) -> dict[str, str]:
    """Variables for tools.yaml: this checkout on the shop's path, the stdio transport unless a URL is given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SWITCHBOARD_SHOP_URL"] = ""
    env.pop("SWITCHBOARD_SHOP_DATA", None)
    env.update(extra)
    return env


def shop_dump(dsn: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json", "--show-personal-data",
                          "--dsn", dsn], cwd=REPO,
                         env=gateway_env(), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


class ApiServer:
    def __init__(self, port: int):
        self.port = port
        self.requests: list[dict] = []
        self.hits: Counter = Counter()
        app = FastAPI()

        def seen(request: Request, body=None) -> None:
            self.requests.append({"method": request.method, "raw_path": request.scope["raw_path"].decode(),
                                  "query": request.url.query, "headers": dict(request.headers), "body": body})

        @app.get("/orders/{order_id}")
        async def order(order_id: str, request: Request):
            seen(request)
            self.hits["order"] += 1
            return {"order_id": order_id, "status": "paid"}

        @app.post("/refunds")
        async def refund(request: Request):
            body = await request.json()
            seen(request, body)
            self.hits["refund"] += 1
            return {"refund_id": f"R-{self.hits['refund']}", "amount": body.get("amount")}

        @app.get("/boom")
        async def boom(request: Request):
            seen(request)
            self.hits["boom"] += 1
            return JSONResponse({"detail": "internal"}, status_code=500)

        @app.get("/flaky")
        async def flaky(request: Request):
            seen(request)
            self.hits["flaky"] += 1
            if self.hits["flaky"] == 1:
                return JSONResponse({"detail": "try again"}, status_code=503)
            return {"order_id": "1", "status": "paid"}

        @app.get("/missing")
        async def missing(request: Request):
            seen(request)
            self.hits["missing"] += 1
            return JSONResponse({"detail": "no such order"}, status_code=404)

        @app.get("/slow")
        def slow(request: Request):
            seen(request)
            self.hits["slow"] += 1
            time.sleep(1.5)
            return {"order_id": "1", "status": "paid"}

        @app.get("/text")
        async def text(request: Request):
            seen(request)
            self.hits["text"] += 1
            return PlainTextResponse("certainly not JSON")

        @app.get("/shape")
        async def shape(request: Request):
            seen(request)
            self.hits["shape"] += 1
            return {"unexpected": True}

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test API did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
