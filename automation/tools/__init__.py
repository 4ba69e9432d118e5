"""The tool gateway: business systems (MCP servers, HTTP APIs) called under schema, identity, timeout,
retry, rate-limit, circuit-breaker and audit rules declared in a tools YAML file."""

from automation.tools.base import Caller, ToolGateway, ToolResult, ToolSpec, Transport
from automation.tools.config import BUNDLED_TOOLS, ToolConfigError, load_tools_file, parse_tools
from automation.tools.gateway import Gateway, ToolSettings, build_tool_gateway, load_tool_gateway
from automation.tools.redact import mask_text, redact_value

__all__ = [
    "BUNDLED_TOOLS", "Caller", "Gateway", "ToolConfigError", "ToolGateway", "ToolResult", "ToolSettings",
    "ToolSpec", "Transport", "build_tool_gateway", "load_tool_gateway", "load_tools_file", "mask_text",
    "parse_tools", "redact_value",
]
