"""Channel adapters: every channel's webhook flattened into one internal message."""
