"""A small real HTTP API on loopback for the HTTP transport's tests (FastAPI served by uvicorn in a thread)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse


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
