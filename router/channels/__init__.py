"""Channels: one folder per channel (inbound verification and parsing, outbound sending), the shared
adapter and sender protocols (``base.py``, ``delivery.py``), text splitting and the registry.

Channels never import the turn logic: the app hands a parsed message to the pipeline."""
