"""handoff."""
