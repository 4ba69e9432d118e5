"""How failures are reported and retried, the same way in every package.

A leaf package: it imports nothing of router, rag, handoff or automation, so each of them can use
it. ``problem`` builds RFC 9457 problem documents, ``retry`` re-runs a transaction that lost a
race with another (deadlock, serialization failure), ``yaml_source`` loads YAML keeping the line
of every field so a configuration error names ``file:line field``.
"""
