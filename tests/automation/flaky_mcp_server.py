"""An MCP server that misbehaves on purpose (stdio): slow, wrong, erroring and crashing tools.

``hits`` tells how many calls reached each tool, so a test can prove that a call never left the gateway.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("flaky", log_level="ERROR")
_hits: Counter = Counter()


@app.tool()
def echo(value: str) -> dict[str, Any]:
    _hits["echo"] += 1
    return {"value": value}


@app.tool()
def slow(seconds: float) -> dict[str, Any]:
    _hits["slow"] += 1
    time.sleep(seconds)
    return {"value": "late"}


@app.tool()
def wrong_shape() -> dict[str, Any]:
    _hits["wrong_shape"] += 1
    return {"unexpected": 1}


@app.tool(structured_output=False)
def not_json() -> str:
    _hits["not_json"] += 1
    return "this is not JSON"


@app.tool()
def refuses() -> dict[str, Any]:
    _hits["refuses"] += 1
    raise ToolError("not_found: nothing here")


@app.tool()
def crashes() -> dict[str, Any]:
    _hits["crashes"] += 1
    raise RuntimeError("boom")


@app.tool()
def hits() -> dict[str, Any]:
    return {"hits": dict(_hits)}


if __name__ == "__main__":
    app.run()
