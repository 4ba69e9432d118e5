"""The example shop: an MCP server over customers and orders kept in the Postgres schema ``shop``.

The demo's and the tests' tool backend, and a template for a deployer's own server. A customer of the web
channel is the shop customer with the same ``customer_id``; other channels map through the ``identity``
section of tools.yaml (see docs/tools.md).
"""
