"""The tool gateway: tools declared as data, reached over MCP or HTTP."""
