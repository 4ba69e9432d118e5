"""The agent console: a static page at ``/console`` that works the L2/L3 queue through ``/v1/handoff``."""
